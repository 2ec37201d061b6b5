"""Modules that schedules swap in (Slapo's `slapo.op`)."""

from .linear import LinearWithAct, LinearWithDropout, LinearWithSeparateBias, LinearWithSyncFunc

__all__ = ["LinearWithAct", "LinearWithDropout", "LinearWithSeparateBias", "LinearWithSyncFunc"]
