"""`slapo.utils.report`: `report_memory`, a one-line memory report at a point of a program.

Slapo printed the CUDA allocator's counters; here the line also works on CPU (the process's
peak resident set size), so a program that calls it runs anywhere.
"""

from __future__ import annotations

import gc
import resource
import sys

import torch

from ..logger import get_logger

_MB = 1024 * 1024


def memory_stats() -> dict[str, float]:
    """Peak host RSS and, when CUDA is in use, the allocator's counters (MB)."""
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats = {"host_peak_rss_mb": peak_rss / (_MB if sys.platform == "darwin" else 1024)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        stats["allocated_mb"] = torch.cuda.memory_allocated() / _MB
        stats["max_allocated_mb"] = torch.cuda.max_memory_allocated() / _MB
        stats["reserved_mb"] = torch.cuda.memory_reserved() / _MB
    return stats


def report_memory(msg: str = "", report_gc: bool = False) -> str:
    """Log (rank 0) and return one line of memory counters, prefixed by `msg`. `report_gc`
    adds the number of live tensors the garbage collector sees."""
    parts = [f"{key}={value:.1f}" for key, value in memory_stats().items()]
    if report_gc:
        tensors = sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor))
        parts.append(f"live_tensors={tensors}")
    line = f"{msg} {' | '.join(parts)}".strip()
    get_logger().info(line, ranks=0)
    return line


__all__ = ["memory_stats", "report_memory"]
