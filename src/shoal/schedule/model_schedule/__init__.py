"""The schedule library: one module per model of `shoal.models`, each with a short
tensor-parallel + activation-checkpointing (+ optional fusion) schedule.

`apply_schedule(model, "gpt2", ckpt_ratio=0.5, group=tp_group)` mirrors Slapo's
`model_schedule.apply_schedule`: it returns the `Schedule`, whose `.mod` is the scheduled model.
Each per-model module exposes `schedule(sch, ...)`, the schedule lines themselves, and its own
`apply_schedule(model, ...)`. Hugging Face transformers models are scheduled by `hf.py`; the
helper generators Slapo's schedules export (`shard_attention`, `gen_embedding_hooks`, ...) live
in `base.py` and are re-exported here.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from .base import (
    checkpoint,
    fuse_bias_gelu,
    generate_pipeline_cuts,
    shard_attention,
    shard_mlp,
    shard_word_embedding,
)
from .hf import HF_SPECS, is_hf_model

SCHEDULES = ("gpt2", "bert", "llama", "wideresnet")
HF_SCHEDULES = tuple(HF_SPECS)  # gpt2, gpt_neo, bert, roberta, opt, llama (transformers models)


def apply_schedule(
    model: nn.Module,
    model_name: str,
    *,
    ckpt_ratio: float = 0.0,
    fusion: bool = False,
    group: Any = None,
    **kwargs: Any,
) -> Any:
    """Apply the library schedule of `model_name` to `model`; returns the `Schedule`.

    Extra keyword arguments go to the model's own `apply_schedule` (e.g. `vocab_parallel=True`
    for `gpt2` and `llama`). A transformers model gets the `hf` schedule of that name."""
    if is_hf_model(model):
        from .hf import apply_schedule as apply_hf

        return apply_hf(model, model_name, ckpt_ratio=ckpt_ratio, group=group, **kwargs)
    if model_name not in SCHEDULES:
        raise ValueError(f"no schedule for model {model_name!r}; known: {list(SCHEDULES)}")
    module = importlib.import_module(f"shoal.schedule.model_schedule.{model_name}")
    return module.apply_schedule(model, ckpt_ratio=ckpt_ratio, fusion=fusion, group=group, **kwargs)


def check_config(model_name: str, config: Any, world_size: int) -> None:
    """Raise ValueError if the library schedule of `model_name` cannot apply to a model built
    from `config` over `world_size` ranks; it needs no model, so a caller (the autotuner) can
    refuse the input before building or launching anything. Schedules without a
    `check_config` of their own take every valid config."""
    if model_name not in SCHEDULES:
        raise ValueError(f"no schedule for model {model_name!r}; known: {list(SCHEDULES)}")
    module = importlib.import_module(f"shoal.schedule.model_schedule.{model_name}")
    check = getattr(module, "check_config", None)
    if check is not None:
        check(config, world_size)


__all__ = [
    "HF_SCHEDULES",
    "SCHEDULES",
    "apply_schedule",
    "check_config",
    "checkpoint",
    "fuse_bias_gelu",
    "generate_pipeline_cuts",
    "shard_attention",
    "shard_mlp",
    "shard_word_embedding",
]
