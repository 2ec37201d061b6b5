"""Fused projection modules that schedules swap in: `FusedQKV` and `FusedMLP`.

`FusedQKV` computes the query, key and value projections with one matmul. Its weight rows are
ordered head by head (``[head][q|k|v][head_dim]``), so ``shard("weight", 0)`` (and the bias) on
`fused_linear` hands whole heads to each rank and the block stays correct under tensor
parallelism without any reshaping in the schedule.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FusedQKV(nn.Module):
    """``q, k, v = FusedQKV(hidden, heads)(x)``, each of shape (..., local_heads * head_dim)."""

    def __init__(self, hidden_size: int, num_heads: int, world_size: int = 1) -> None:
        super().__init__()
        if hidden_size % num_heads or num_heads % world_size:
            raise ValueError(
                f"FusedQKV: hidden_size {hidden_size} must be divisible by num_heads {num_heads}, "
                f"and num_heads by world_size {world_size}"
            )
        self.hidden_size, self.num_heads, self.world_size = hidden_size, num_heads, world_size
        self.head_dim = hidden_size // num_heads
        self.fused_linear = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        qkv = self.fused_linear(x)
        # (..., heads, 3, head_dim): works for the full and for a head-sharded weight
        qkv = qkv.view(*qkv.shape[:-1], -1, 3, self.head_dim)
        q, k, v = qkv.unbind(dim=-2)
        return tuple(t.reshape(*t.shape[:-2], -1) for t in (q, k, v))

    @classmethod
    def from_linears(cls, q: nn.Linear, k: nn.Linear, v: nn.Linear, num_heads: int) -> FusedQKV:
        """Build from three projections, copying their weights into the head-major layout."""
        fused = cls(q.in_features, num_heads)
        head_dim = fused.head_dim
        with torch.no_grad():
            weight = torch.stack([m.weight.view(num_heads, head_dim, -1) for m in (q, k, v)], 1)
            fused.fused_linear.weight.copy_(weight.reshape(3 * q.out_features, -1))
            if q.bias is not None:
                bias = torch.stack([m.bias.view(num_heads, head_dim) for m in (q, k, v)], 1)
                fused.fused_linear.bias.copy_(bias.reshape(-1))
            else:
                fused.fused_linear.bias.zero_()
        return fused


class FusedMLP(nn.Module):
    """``dropout(fc_out(act(fc_in(x))))`` with `act` "gelu", "relu", "silu" or a module."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        orig_act: str | nn.Module = "gelu",
        resid_pdrop: float = 0.0,
    ) -> None:
        super().__init__()
        self.fc_in = nn.Linear(hidden_size, intermediate_size)
        self.fc_out = nn.Linear(intermediate_size, hidden_size)
        acts = {"gelu": nn.GELU(), "relu": nn.ReLU(), "silu": nn.SiLU()}
        self.act = acts[orig_act] if isinstance(orig_act, str) else orig_act
        self.resid_pdrop = resid_pdrop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc_out(self.act(self.fc_in(x)))
        return F.dropout(out, self.resid_pdrop, self.training)
