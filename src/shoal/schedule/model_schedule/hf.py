"""Schedules for Hugging Face transformers models: GPT-2, GPT-Neo, BERT/RoBERTa, OPT, LLaMA.

Each model is described by where its blocks, attention and MLP projections live and which
head-count attributes its attention reads (`HF_SPECS`, for transformers 4.46); `schedule` then
applies the same Megatron-style tensor parallelism to every block (`base.shard_attention`,
`base.shard_mlp`; GPT-2's packed ``c_attn`` is regrouped per rank first) and checkpoints the
first `int(L * ckpt_ratio)` blocks. Works on the bare model (`GPT2Model`) and on heads around it
(`GPT2LMHeadModel`: the blocks are found under its `base_model_prefix`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

import shoal.schedule as slapo

from . import base


@dataclass(frozen=True)
class HFSpec:
    """Where a transformers architecture keeps the parts a TP schedule touches."""

    layers: str  # the ModuleList of blocks
    attn: str  # attention module, relative to a block
    qkv: tuple[str, ...]  # relative to `attn`; one name = packed q/k/v
    out: str  # relative to `attn`
    attrs: tuple[str, ...]  # head counts read by the attention forward, relative to `attn`
    mlp: str  # MLP owner, relative to a block ("" = the block itself)
    fc_in: tuple[str, ...]
    fc_out: str
    embedding: str  # the token embedding, relative to the bare model
    conv1d: bool = False


_BERT = HFSpec(
    "encoder.layer",
    "attention",
    ("self.query", "self.key", "self.value"),
    "output.dense",
    ("self.num_attention_heads", "self.all_head_size"),
    "",
    ("intermediate.dense",),
    "output.dense",
    "embeddings.word_embeddings",
)
HF_SPECS: dict[str, HFSpec] = {
    "gpt2": HFSpec(
        "h", "attn", ("c_attn",), "c_proj", ("num_heads", "split_size", "embed_dim"), "mlp",
        ("c_fc",), "c_proj", "wte", conv1d=True,
    ),
    "gpt_neo": HFSpec(
        "h", "attn.attention", ("q_proj", "k_proj", "v_proj"), "out_proj",
        ("num_heads", "embed_dim"), "mlp", ("c_fc",), "c_proj", "wte",
    ),
    "bert": _BERT,
    "roberta": _BERT,
    "opt": HFSpec(
        "decoder.layers", "self_attn", ("q_proj", "k_proj", "v_proj"), "out_proj",
        ("num_heads", "embed_dim"), "", ("fc1",), "fc2", "decoder.embed_tokens",
    ),
    "llama": HFSpec(
        "layers", "self_attn", ("q_proj", "k_proj", "v_proj"), "o_proj",
        ("num_heads", "num_key_value_heads"), "mlp", ("gate_proj", "up_proj"), "down_proj",
        "embed_tokens",
    ),
}  # fmt: skip


def is_hf_model(model: nn.Module) -> bool:
    return type(model).__module__.startswith("transformers.")


def _prefix(model: nn.Module, spec: HFSpec) -> str:
    """The path of the bare model inside a head model ("" when `model` is the bare model)."""
    try:
        model.get_submodule(spec.layers)
        return ""
    except AttributeError:
        return getattr(model, "base_model_prefix", "")


def schedule(
    sch: Any,
    model_name: str,
    *,
    ckpt_ratio: float = 0.0,
    prefix: str = "",
    vocab_parallel: bool = False,
) -> None:
    """Tensor parallelism over `sch.group` for every block, then checkpointing.

    `vocab_parallel` also splits the token embedding by rows (for bare models: a head tied to
    the embedding would need its own vocabulary-parallel treatment)."""
    spec = HF_SPECS[model_name]
    layers = f"{prefix}.{spec.layers}" if prefix else spec.layers
    if vocab_parallel:
        base.shard_word_embedding(sch, f"{prefix}.{spec.embedding}" if prefix else spec.embedding)
    blocks = [f"{layers}.{i}" for i in range(len(sch.get_module(layers)))]
    for block in blocks:
        attn = sch[f"{block}.{spec.attn}"]
        base.shard_attention(attn, spec.qkv, spec.out, spec.attrs, conv1d=spec.conv1d)
        mlp = sch[f"{block}.{spec.mlp}" if spec.mlp else block]
        base.shard_mlp(mlp, spec.fc_in, spec.fc_out, conv1d=spec.conv1d)
    if base.checkpoint(sch, blocks, ckpt_ratio) and hasattr(sch.mod, "config"):
        # a recomputed block would append to the key/value cache a second time (transformers
        # turns the cache off under its own gradient checkpointing for the same reason)
        sch.mod.config.use_cache = False


def apply_schedule(
    model: nn.Module,
    model_name: str,
    *,
    ckpt_ratio: float = 0.0,
    group: Any = None,
    prefix: str | None = None,
    vocab_parallel: bool = False,
    **_unused: Any,
) -> Any:
    """Schedule a transformers model (built by the caller, e.g. from a config); returns the
    `Schedule`. Slapo's other keywords (fp16, attn_op_name, ...) are accepted and ignored."""
    if model_name not in HF_SPECS:
        raise ValueError(f"no Hugging Face schedule for {model_name!r}; known: {list(HF_SPECS)}")
    sch = slapo.create_schedule(model, group=group)
    spec = HF_SPECS[model_name]
    if prefix is None:
        prefix = _prefix(model, spec)
    schedule(sch, model_name, ckpt_ratio=ckpt_ratio, prefix=prefix, vocab_parallel=vocab_parallel)
    return sch
