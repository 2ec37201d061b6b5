"""The schedule for `shoal.models.llama.Llama`: tensor parallelism, checkpointing, QKV fusion.

In every block: q/k/v (or the fused qkv) and the SwiGLU `gate_proj`/`up_proj` column-parallel
with their input gradient all-reduced, `o_proj` and `down_proj` row-parallel with their output
all-reduced. The projections have no bias. Rotary tables depend only on `head_dim`, so each rank
rotates the whole heads it holds unchanged. RMSNorms stay replicated; the embedding and the LM
head too, unless `vocab_parallel=True` (see `vocab.py`, kept out of the schedule proper).
The first `int(n_layers * ckpt_ratio)` blocks are activation-checkpointed. `fusion=True`
replaces q/k/v with one `FusedQKV` GEMM.
"""

from __future__ import annotations

from typing import Any

from torch import nn

import shoal.schedule as slapo
from shoal.schedule.model_schedule.ops import FusedQKV
from shoal.schedule.model_schedule.vocab import shard_vocab


def schedule(sch: Any, *, ckpt_ratio: float = 0.0, fusion: bool = False) -> None:
    """The LLaMA schedule proper (the lines counted in the benchmarks' lines-of-code table)."""
    n_layer, head_dim = len(sch.mod.layers), sch.mod.layers[0].self_attn.head_dim
    for i in range(n_layer):
        if fusion:
            sch[f"layers.{i}.self_attn"].trace()
            qkv = [sch.get_module(f"layers.{i}.self_attn.{p}_proj") for p in "qkv"]
            nodes = sch[f"layers.{i}.self_attn"].find(r"[qkv]_proj")
            sch[f"layers.{i}.self_attn"].replace(FusedQKV.from_linears(*qkv, head_dim), nodes)
        if sch.world_size > 1:
            attn = ["FusedQKV_0.qkv"] if fusion else [f"{p}_proj" for p in "qkv"]
            for name in [f"self_attn.{a}" for a in attn] + ["mlp.gate_proj", "mlp.up_proj"]:
                sch[f"layers.{i}.{name}"].shard("weight", axis=0)
                sch[f"layers.{i}.{name}"].sync("bwd_post", "all_reduce")
            for name in ["self_attn.o_proj", "mlp.down_proj"]:
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
    vocab_parallel: bool = False,
) -> Any:
    """Schedule `model` (a `Llama`) over the tensor-parallel `group`; returns the `Schedule`."""
    if not 0.0 <= ckpt_ratio <= 1.0:
        raise ValueError(f"ckpt_ratio must be in [0, 1], got {ckpt_ratio}")
    sch = slapo.create_schedule(model, group=group)
    schedule(sch, ckpt_ratio=ckpt_ratio, fusion=fusion)
    if vocab_parallel and sch.world_size > 1:
        shard_vocab(sch, "embed_tokens", "lm_head")
    return sch
