"""Modules that schedules swap in (Slapo's `slapo.op`)."""

from .cross_entropy import ParallelCrossEntropy, vocab_parallel_cross_entropy
from .fused import FusedMLP, FusedQKV
from .linear import LinearWithAct, LinearWithDropout, LinearWithSeparateBias, LinearWithSyncFunc
from .print import Print

__all__ = [
    "FusedMLP",
    "FusedQKV",
    "LinearWithAct",
    "LinearWithDropout",
    "LinearWithSeparateBias",
    "LinearWithSyncFunc",
    "ParallelCrossEntropy",
    "Print",
    "vocab_parallel_cross_entropy",
]
