"""Gradient codecs for slow links: top-k selection, one packed message, error feedback.

Two selectors pick exactly k entries of a flat fp32 tensor, so every message of a tensor has
the same size (an all-gather needs equal sizes, and the wire time is predictable):
- `topk_indices`: the k largest |g| (the reference);
- `BlockTopK`: StellaTrain's cache-aware selector. Scores are sums of |g| over blocks of 16
  (one 64-byte cache line; a short last block is scaled up to 16). Blocks whose score is at
  least a per-tensor threshold T are taken in memory order until k entries are found; any
  shortfall is filled from the best remaining blocks. T starts at the (k/16)-th largest score
  and moves by AIMD: down by 1 % when the threshold pass came up short, up by 1 % of T0 when it
  filled k, so the cheap pass usually suffices.
A message is ONE uint8 tensor: k fp32 values, then k indices as uint16 when the tensor has at
most 65536 entries, else int32 (`shoal.control.bandwidth` owns that size formula).

`ErrorFeedback` keeps, per tensor, the residual of what was not sent: with a = grad + residual,
the message carries a[idx] and the new residual is a with idx zeroed, so (sent, scattered) +
(new residual) == grad + old residual elementwise, bit for bit (each entry is a + 0 or 0 + a).
The merge of the sites' messages scatter-adds them in site order and divides by the number of
sites. Indices are sent sorted, so a message depends only on the selected set.
"""

from __future__ import annotations

import sys

import torch

from shoal.control.bandwidth import U16_MAX_NUMEL, entries, index_bytes, message_bytes

BLOCK = 16  # entries per block: one 64-byte cache line of fp32
AIMD_DECREASE = 0.99  # T <- 0.99 T when the threshold pass found fewer than k
AIMD_INCREASE = 0.01  # T <- T + 0.01 T0 when it found k

assert sys.byteorder == "little", "packed indices are written little-endian"


def topk_indices(flat: torch.Tensor, k: int) -> torch.Tensor:
    """Sorted int64 indices of the k largest |flat| entries."""
    _check_k(flat, k)
    return torch.topk(flat.abs(), k, sorted=False).indices.sort().values


def _check_k(flat: torch.Tensor, k: int) -> None:
    if flat.dim() != 1 or not 1 <= k <= flat.numel():
        raise ValueError(f"need a flat tensor and 1 <= k <= numel, got {tuple(flat.shape)}, {k}")


def _block_scores(flat: torch.Tensor) -> torch.Tensor:
    """Sum of |g| per block of 16; a short last block is scaled to a full block's weight."""
    n = flat.numel()
    nblocks = -(-n // BLOCK)
    padded = torch.zeros(nblocks * BLOCK, dtype=flat.dtype, device=flat.device)
    padded[:n] = flat.abs()
    scores = padded.view(nblocks, BLOCK).sum(1)
    tail = n - (nblocks - 1) * BLOCK
    if tail < BLOCK:
        scores[-1] *= BLOCK / tail
    return scores


class BlockTopK:
    """Cache-aware block selector with a per-tensor AIMD threshold (state keyed by name)."""

    def __init__(self) -> None:
        self.threshold: dict[str, float] = {}

    def indices(self, name: str, flat: torch.Tensor, k: int) -> torch.Tensor:
        """Sorted int64 indices of exactly k entries, taken block by block."""
        _check_k(flat, k)
        n = flat.numel()
        scores = _block_scores(flat)
        if name not in self.threshold:
            first = torch.topk(scores, min(-(-k // BLOCK), scores.numel())).values[-1].item()
            self.threshold[name] = first
        lengths = torch.full_like(scores, BLOCK, dtype=torch.int64)
        lengths[-1] = n - (scores.numel() - 1) * BLOCK
        above = scores >= self.threshold[name]
        # Memory order with early exit: keep the above-threshold blocks until k entries are in.
        taken = torch.nonzero(above).flatten()
        before = torch.cumsum(lengths[taken], 0) - lengths[taken]
        taken = taken[before < k]
        filled = int(lengths[taken].sum())
        if filled < k:
            self.threshold[name] *= AIMD_DECREASE
            rest = scores.clone()
            rest[taken] = -1.0  # scores are >= 0, so taken blocks rank last
            # Enough best remaining blocks for the shortfall, one spare for a short tail block.
            need = min(-(-(k - filled) // BLOCK) + 1, scores.numel() - taken.numel())
            extra = torch.topk(rest, need).indices
            taken = torch.cat([taken, extra])
        else:
            # Additive increase scaled by the overshoot (as StellaTrain's threshold-v): with a
            # fixed step T lags a growing residual, and early exit then starves later blocks.
            overshoot = int(above.sum()) / -(-k // BLOCK)
            self.threshold[name] += AIMD_INCREASE * overshoot * float(scores.max())
        idx = (taken.unsqueeze(1) * BLOCK + torch.arange(BLOCK, device=flat.device)).flatten()
        idx = idx[idx < n][:k]
        return idx.sort().values


def pack(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor:
    """One uint8 message: fp32 values, then compact little-endian indices."""
    k = values.numel()
    width = index_bytes(numel)
    idx_bytes = indices.to(torch.int32).contiguous().view(torch.uint8).view(k, 4)[:, :width]
    msg = torch.cat([values.to(torch.float32).contiguous().view(torch.uint8), idx_bytes.flatten()])
    assert msg.numel() == message_bytes(numel, k)
    return msg


def unpack(message: torch.Tensor, numel: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 values, int64 indices) back from a message of a tensor of `numel` entries."""
    if message.dtype != torch.uint8 or message.numel() != message_bytes(numel, k):
        raise ValueError(f"message of {message.numel()} bytes does not hold k={k} of {numel}")
    values = message[: 4 * k].clone().view(torch.float32)
    width = index_bytes(numel)
    wide = torch.zeros(k, 4, dtype=torch.uint8, device=message.device)
    wide[:, :width] = message[4 * k :].view(k, width)
    return values, wide.view(torch.int32).flatten().to(torch.int64)


def merge(messages: list[torch.Tensor], numel: int, k: int) -> torch.Tensor:
    """Average of the sites' sparse messages as a dense fp32 tensor (site order fixed)."""
    dense = torch.zeros(numel, dtype=torch.float32, device=messages[0].device)
    for message in messages:
        values, indices = unpack(message, numel, k)
        dense.index_add_(0, indices, values)
    return dense / len(messages)


class ErrorFeedback:
    """Per-tensor residuals; `compress` returns one message and keeps the exact remainder."""

    def __init__(self, keep_ratio: float, selector: str = "block") -> None:
        if selector not in ("block", "topk"):
            raise ValueError(f"selector must be 'block' or 'topk', got {selector!r}")
        self.keep_ratio = keep_ratio
        self.selector = BlockTopK() if selector == "block" else None
        self.residual: dict[str, torch.Tensor] = {}

    def k(self, numel: int) -> int:
        return entries(numel, self.keep_ratio)

    def compress(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        """Message for grad + residual; the residual becomes exactly what was not sent."""
        flat = grad.detach().reshape(-1).to(torch.float32)
        old = self.residual.get(name)
        acc = flat.clone() if old is None else flat + old
        k = self.k(acc.numel())
        if self.selector is None:
            idx = topk_indices(acc, k)
        else:
            idx = self.selector.indices(name, acc, k)
        message = pack(acc[idx], idx, acc.numel())
        acc[idx] = 0.0  # the residual keeps every entry it did not send, unrounded
        self.residual[name] = acc
        return message

    def state_dict(self) -> dict:
        """Residuals and thresholds. Residual tensors are replaced, never changed in place, so
        this shallow copy is a snapshot that a rolled-back step can return to."""
        threshold = dict(self.selector.threshold) if self.selector else {}
        return {"residual": dict(self.residual), "threshold": threshold}

    def load_state_dict(self, state: dict) -> None:
        self.residual = dict(state["residual"])
        if self.selector is not None:
            self.selector.threshold = {k: float(v) for k, v in state["threshold"].items()}


def no_feedback_message(grad: torch.Tensor, keep_ratio: float) -> torch.Tensor:
    """Top-k message of the gradient alone: what is dropped is lost (the ablation of EF)."""
    flat = grad.detach().reshape(-1).to(torch.float32)
    idx = topk_indices(flat, entries(flat.numel(), keep_ratio))
    return pack(flat[idx], idx, flat.numel())


__all__ = [
    "BLOCK",
    "U16_MAX_NUMEL",
    "BlockTopK",
    "ErrorFeedback",
    "merge",
    "no_feedback_message",
    "pack",
    "topk_indices",
    "unpack",
]
