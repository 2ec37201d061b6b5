"""shoal."""
