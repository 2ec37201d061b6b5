"""The slow-link test bed: sites as network namespaces behind rate-shaped links (see testbed.py)."""

from slowlink.testbed import SlowLinkBed, bed_available, run_allreduce_probe

__all__ = ["SlowLinkBed", "bed_available", "run_allreduce_probe"]
