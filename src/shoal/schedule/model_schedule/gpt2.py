"""The schedule for `shoal.models.gpt2.GPT`: tensor parallelism, checkpointing, QKV fusion.

Megatron-style tensor parallelism over `group`: in every block the q/k/v projections (or the
fused qkv) and `mlp.fc_in` are column-parallel (weight and bias split on the output axis; their
input gradient is all-reduced), `attn.out_proj` and `mlp.fc_out` are row-parallel (output
all-reduced). Heads split evenly because the model infers its head count from the projection
width. LayerNorms and position embeddings stay replicated; the token embedding and the LM head
too, unless `vocab_parallel=True` (see `vocab.py`, kept out of the schedule proper). The first
`int(n_layer * ckpt_ratio)` blocks are activation-checkpointed. `fusion=True` traces each
attention and horizontally replaces q/k/v with one `FusedQKV` GEMM.
"""

from __future__ import annotations

from typing import Any

from torch import nn

import shoal.schedule as slapo
from shoal.schedule.model_schedule.ops import FusedQKV
from shoal.schedule.model_schedule.vocab import shard_vocab
from shoal.schedule.sharding.embedding import gen_embedding_hooks

__all__ = [
    "apply_schedule",
    "check_config",
    "gen_embedding_hooks",
    "schedule",
]  # Slapo's programs import the hooks here


def schedule(sch: Any, *, ckpt_ratio: float = 0.0, fusion: bool = False) -> None:
    """The GPT schedule proper (the lines counted in the benchmarks' lines-of-code table)."""
    n_layer, head_dim = len(sch.mod.h), sch.mod.h[0].attn.head_dim
    for i in range(n_layer):
        if fusion:
            sch[f"h.{i}.attn"].trace()
            qkv = [sch.get_module(f"h.{i}.attn.{p}_proj") for p in "qkv"]
            nodes = sch[f"h.{i}.attn"].find(r"[qkv]_proj")
            sch[f"h.{i}.attn"].replace(FusedQKV.from_linears(*qkv, head_dim), nodes)
        if sch.world_size > 1:
            cols = ["attn.FusedQKV_0.qkv"] if fusion else [f"attn.{p}_proj" for p in "qkv"]
            for name in [*cols, "mlp.fc_in"]:
                sch[f"h.{i}.{name}"].shard(["weight", "bias"], axis=0)
                sch[f"h.{i}.{name}"].sync("bwd_post", "all_reduce")
            for name in ["attn.out_proj", "mlp.fc_out"]:
                sch[f"h.{i}.{name}"].shard("weight", axis=1)
                sch[f"h.{i}.{name}"].sync("fwd_post", "all_reduce")
        if i < int(n_layer * ckpt_ratio):
            sch[f"h.{i}"].checkpoint()


def check_config(config: Any, world_size: int) -> None:
    """Refuse a `GPTConfig` this schedule cannot apply over `world_size` ranks (ValueError).

    Sharding splits every projection's bias with its weight; with one rank nothing is split,
    so checkpointing and fusion take a model without biases too."""
    if world_size > 1 and not config.bias:
        raise ValueError(
            "the GPT schedule shards biases over more than one rank; build the model with bias=True"
        )


def apply_schedule(
    model: nn.Module,
    *,
    ckpt_ratio: float = 0.0,
    fusion: bool = False,
    group: Any = None,
    vocab_parallel: bool = False,
) -> Any:
    """Schedule `model` (a `GPT`, with biases if `group` has more than one rank) over the
    tensor-parallel `group`; returns the `Schedule` (its `.mod` is the scheduled model)."""
    if not 0.0 <= ckpt_ratio <= 1.0:
        raise ValueError(f"ckpt_ratio must be in [0, 1], got {ckpt_ratio}")
    sch = slapo.create_schedule(model, group=group)
    check_config(model.config, sch.world_size)
    schedule(sch, ckpt_ratio=ckpt_ratio, fusion=fusion)
    if vocab_parallel and sch.world_size > 1:
        shard_vocab(sch, "wte", "lm_head")
    return sch
