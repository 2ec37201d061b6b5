"""Pure cluster model: node specs, providers, revocation models and the cost ledger (no torch)."""
