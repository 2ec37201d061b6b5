"""Pure performance and cost model shared by the live controller and the simulator (no torch)."""
