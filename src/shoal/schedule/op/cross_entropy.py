"""Vocabulary-parallel cross entropy (the loss after a column-parallel LM head).

Each rank holds logits for its slice ``[rank * V/p, (rank + 1) * V/p)`` of the vocabulary. The
loss needs only three all-reduces of per-token scalars (max, sum of exponentials, target
logit), never the full ``(tokens, V)`` logits; the gradient ``softmax - onehot`` is computed on
the local slice.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..sharding import collectives as C


def _all_reduce(tensor: torch.Tensor, op: Any, group: Any) -> torch.Tensor:
    if C.world_size(group) > 1:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, group, ignore_index):
        local_vocab = logits.shape[-1]
        start = C.rank(group) * local_vocab
        logits = logits.float()
        max_logit = _all_reduce(logits.max(dim=-1).values, dist.ReduceOp.MAX, group)
        shifted = logits - max_logit.unsqueeze(-1)
        local_target = target - start
        outside = (local_target < 0) | (local_target >= local_vocab)
        local_target = local_target.masked_fill(outside, 0)
        picked = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1)
        picked = _all_reduce(picked.masked_fill(outside, 0.0), dist.ReduceOp.SUM, group)
        exp = shifted.exp()
        sum_exp = _all_reduce(exp.sum(dim=-1), dist.ReduceOp.SUM, group)
        loss = sum_exp.log() - picked
        ignored = target == ignore_index
        loss = loss.masked_fill(ignored, 0.0)
        ctx.save_for_backward(exp / sum_exp.unsqueeze(-1), local_target, outside, ignored)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, local_target, outside, ignored = ctx.saved_tensors
        onehot = torch.zeros_like(softmax).scatter_(-1, local_target.unsqueeze(-1), 1.0)
        onehot = onehot.masked_fill(outside.unsqueeze(-1), 0.0)
        scale = grad.masked_fill(ignored, 0.0).unsqueeze(-1)
        return (softmax - onehot) * scale, None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, group: Any = None, ignore_index: int = -100
) -> torch.Tensor:
    """Per-token loss from vocabulary-sharded `logits` (..., V/p) and global `target` ids."""
    return _VocabParallelCE.apply(logits, target, group, ignore_index)


class ParallelCrossEntropy(nn.Module):
    """`vocab_parallel_cross_entropy` as a module; `reduction` is "none", "mean" or "sum"."""

    def __init__(self, group: Any = None, ignore_index: int = -100, reduction: str = "none"):
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"reduction must be 'none', 'mean' or 'sum', not {reduction!r}")
        self.group, self.ignore_index, self.reduction = group, ignore_index, reduction

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = vocab_parallel_cross_entropy(logits, target, self.group, self.ignore_index)
        if self.reduction == "sum":
            return loss.sum()
        if self.reduction == "mean":
            return loss.sum() / (target != self.ignore_index).sum().clamp(min=1)
        return loss
