"""Pure cluster model: node specs, revocation models and the cost ledger (no torch)."""
