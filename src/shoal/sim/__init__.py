"""Trace-driven cluster simulator: jobs, workloads, policies and the event core (no torch)."""
