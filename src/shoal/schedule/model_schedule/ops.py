"""Modules that the model schedules swap in; currently the fused q/k/v projection.

`FusedQKV` computes the three attention projections with one GEMM. Its weight rows are ordered
head by head (q, k, v of head 0, then of head 1, ...), so that an axis-0 `shard` into
`world_size` equal chunks hands every rank whole heads with their own q, k and v, the layout
tensor parallelism needs. It returns `(q, k, v)`, each (B, T, heads * head_dim) as the separate
Linears did, so it can horizontally replace them in a traced attention graph.
"""

from __future__ import annotations

import torch
from torch import nn


class FusedQKV(nn.Module):
    """One Linear for q, k and v, head-major; see the module docstring."""

    def __init__(self, hidden: int, num_heads: int, head_dim: int, bias: bool = True):
        super().__init__()
        self.head_dim = head_dim
        self.qkv = nn.Linear(hidden, 3 * num_heads * head_dim, bias=bias)

    @classmethod
    def from_linears(cls, q: nn.Linear, k: nn.Linear, v: nn.Linear, head_dim: int) -> FusedQKV:
        """A FusedQKV computing exactly what `q`, `k` and `v` compute (weights copied)."""
        if not q.weight.shape == k.weight.shape == v.weight.shape:
            raise ValueError("FusedQKV needs q, k and v projections of the same shape")
        out_features, hidden = q.weight.shape
        if out_features % head_dim:
            raise ValueError(f"projection width {out_features} is not a multiple of {head_dim}")
        heads = out_features // head_dim
        fused = cls(hidden, heads, head_dim, bias=q.bias is not None)
        fused.to(device=q.weight.device, dtype=q.weight.dtype)
        with torch.no_grad():
            # (3, H, hd, in) -> (H, 3, hd, in) -> rows in head-major order
            w = torch.stack([q.weight, k.weight, v.weight]).view(3, heads, head_dim, hidden)
            fused.qkv.weight.copy_(w.transpose(0, 1).reshape(-1, hidden))
            if q.bias is not None:
                b = torch.stack([q.bias, k.bias, v.bias]).view(3, heads, head_dim)
                fused.qkv.bias.copy_(b.transpose(0, 1).reshape(-1))
        return fused

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, seq = x.size(0), x.size(1)
        y = self.qkv(x).view(batch, seq, -1, 3, self.head_dim)  # heads held by this rank
        q = y[:, :, :, 0].reshape(batch, seq, -1)
        k = y[:, :, :, 1].reshape(batch, seq, -1)
        v = y[:, :, :, 2].reshape(batch, seq, -1)
        return q, k, v
