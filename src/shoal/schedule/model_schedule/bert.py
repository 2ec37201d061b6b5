"""The schedule for `shoal.models.bert.Bert`: tensor parallelism, checkpointing, QKV fusion.

In every encoder layer: q/k/v (or the fused qkv) and `mlp.fc_in` column-parallel with their
input gradient all-reduced, `attn.out_proj` and `mlp.fc_out` row-parallel with their output
all-reduced; whole heads go to each rank. The attention mask is an input of the layer, not a
parameter, so it needs no change. Embeddings and LayerNorms stay replicated. The first
`int(num_layers * ckpt_ratio)` layers are activation-checkpointed (both of a layer's positional
inputs are passed through the checkpoint). `fusion=True` replaces q/k/v with one `FusedQKV`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

import shoal.schedule as slapo
from shoal.schedule.model_schedule.ops import FusedQKV


def schedule(sch: Any, *, ckpt_ratio: float = 0.0, fusion: bool = False) -> None:
    """The BERT schedule proper (the lines counted in the benchmarks' lines-of-code table)."""
    n_layer, head_dim = len(sch.mod.layers), sch.mod.layers[0].attn.head_dim
    for i in range(n_layer):
        if fusion:
            sch[f"layers.{i}.attn"].trace()
            qkv = [sch.get_module(f"layers.{i}.attn.{p}_proj") for p in "qkv"]
            nodes = sch[f"layers.{i}.attn"].find(r"[qkv]_proj")
            sch[f"layers.{i}.attn"].replace(FusedQKV.from_linears(*qkv, head_dim), nodes)
        if sch.world_size > 1:
            cols = ["attn.FusedQKV_0.qkv"] if fusion else [f"attn.{p}_proj" for p in "qkv"]
            for name in [*cols, "mlp.fc_in"]:
                sch[f"layers.{i}.{name}"].shard(["weight", "bias"], axis=0)
                sch[f"layers.{i}.{name}"].sync("bwd_post", "all_reduce")
            for name in ["attn.out_proj", "mlp.fc_out"]:
                sch[f"layers.{i}.{name}"].shard("weight", axis=1)
                sch[f"layers.{i}.{name}"].sync("fwd_post", "all_reduce")
        if i < int(n_layer * ckpt_ratio):
            sch[f"layers.{i}"].checkpoint()


def apply_schedule(
    model: nn.Module,
    *,
    ckpt_ratio: float = 0.0,
    fusion: bool = False,
    group: Any = None,
) -> Any:
    """Schedule `model` (a `Bert`) over the tensor-parallel `group`; returns the `Schedule`."""
    if not 0.0 <= ckpt_ratio <= 1.0:
        raise ValueError(f"ckpt_ratio must be in [0, 1], got {ckpt_ratio}")
    sch = slapo.create_schedule(model, group=group)
    schedule(sch, ckpt_ratio=ckpt_ratio, fusion=fusion)
    return sch
