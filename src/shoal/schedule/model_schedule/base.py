"""Schedule helpers under the names Slapo's model schedules export (`slapo.model_schedule`).

The per-model schedules are built from a few recurring steps; each is one function here, usable
on any model: `shard_attention` (column-parallel q/k/v - separate or packed into one projection
- and a row-parallel output projection, with the attention's head-count attributes divided by
the world size), `shard_mlp` (column then row), `shard_word_embedding` (vocabulary-parallel
embedding via `gen_embedding_hooks`), `checkpoint` (the first or every k-th of a list of
blocks, by `ckpt_ratio`), `fuse_bias_gelu` (decompose + find + fuse) and
`generate_pipeline_cuts` (evenly spaced `cut_pipeline_stage` marks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..sharding.embedding import gen_embedding_hooks


def _has(sch: Any, name: str) -> bool:
    return getattr(sch.mod, name, None) is not None


def _pack_by_rank(tensor: torch.Tensor, axis: int, parts: int, world: int) -> torch.Tensor:
    """Reorder ``[q0 q1 | k0 k1 | v0 v1]`` to ``[q0 k0 v0 | q1 k1 v1]`` along `axis`, so that an
    equal split gives each rank its own slice of every packed part."""
    shape = list(tensor.shape)
    split = [*shape[:axis], parts, world, shape[axis] // (parts * world), *shape[axis + 1 :]]
    return tensor.reshape(split).transpose(axis, axis + 1).reshape(shape)


def shard_packed(sch: Any, names: Sequence[str], axis: int, parts: int) -> None:
    """`shard` tensors whose `axis` packs `parts` equal blocks (a fused qkv projection)."""
    for name in names:
        tensor = getattr(sch.mod, name)
        with torch.no_grad():
            tensor.copy_(_pack_by_rank(tensor.detach(), axis, parts, sch.world_size))
        sch.shard(name, axis=axis)
        getattr(sch.mod, name).packed_parts = parts


def _divide_attrs(mod: Any, attrs: Sequence[str], world: int) -> None:
    for dotted in attrs:
        owner_path, _, attr = dotted.rpartition(".")
        owner = mod.get_submodule(owner_path) if owner_path else mod
        value = getattr(owner, attr)
        if value % world:
            raise ValueError(f"{type(owner).__name__}.{attr}={value} is not divisible by {world}")
        setattr(owner, attr, value // world)


def shard_attention(
    sch: Any,
    qkv: Sequence[str],
    out: str,
    attrs: Sequence[str],
    *,
    conv1d: bool = False,
) -> None:
    """Tensor-parallel attention in the schedule `sch` of one attention module.

    `qkv` names the query/key/value projections (one name: a packed qkv projection), `out` the
    output projection, `attrs` the head-count attributes the forward reads (dotted paths below
    the module, divided by the world size). `conv1d`: HF `Conv1D` layers, weight ``(in, out)``."""
    if sch.world_size == 1:
        return
    col, row = (1, 0) if conv1d else (0, 1)
    for name in qkv:
        sub = sch[name]
        if len(qkv) == 1:
            shard_packed(sub, ["weight"], col, 3)
            if _has(sub, "bias"):
                shard_packed(sub, ["bias"], 0, 3)
        else:
            sub.shard(["weight", "bias"] if _has(sub, "bias") else "weight", axis=col)
        sub.sync("bwd_post", "all_reduce")
    sch[out].shard("weight", axis=row)
    sch[out].sync("fwd_post", "all_reduce")
    _divide_attrs(sch.mod, attrs, sch.world_size)


def shard_mlp(sch: Any, fc_in: Sequence[str] | str, fc_out: str, *, conv1d: bool = False) -> None:
    """Column-parallel `fc_in` (one or several, e.g. LLaMA's gate and up), row-parallel `fc_out`."""
    if sch.world_size == 1:
        return
    col, row = (1, 0) if conv1d else (0, 1)
    for name in [fc_in] if isinstance(fc_in, str) else fc_in:
        sub = sch[name]
        sub.shard("weight", axis=col)
        if _has(sub, "bias"):
            sub.shard("bias", axis=0)
        sub.sync("bwd_post", "all_reduce")
    sch[fc_out].shard("weight", axis=row)
    sch[fc_out].sync("fwd_post", "all_reduce")


def shard_word_embedding(sch: Any, embedding: str) -> None:
    """Vocabulary-parallel embedding: rows split, ids outside this rank's range masked."""
    if sch.world_size == 1:
        return
    sch[embedding].shard("weight", axis=0)
    pre, post = gen_embedding_hooks(sch[embedding])
    sch[embedding].sync("fwd_pre", pre)
    sch[embedding].sync("fwd_post", post)


def checkpoint(sch: Any, paths: Sequence[str], ckpt_ratio: float = 1.0, method: str = "head"):
    """Checkpoint `int(len(paths) * ckpt_ratio)` of the blocks at `paths`: the first ones
    (``"head"``) or evenly spread ones (``"uniform"``). Returns how many were wrapped."""
    if not 0.0 <= ckpt_ratio <= 1.0:
        raise ValueError(f"ckpt_ratio must be in [0, 1], got {ckpt_ratio}")
    count = int(len(paths) * ckpt_ratio)
    if method == "head":
        chosen = list(paths[:count])
    elif method == "uniform":
        chosen = [paths[int(i * len(paths) / count)] for i in range(count)] if count else []
    else:
        raise ValueError(f"method must be 'head' or 'uniform', not {method!r}")
    for path in chosen:
        sch[path].checkpoint()
    return len(chosen)


def fuse_bias_gelu(sch: Any, linear: str, compiler: str | None = None) -> None:
    """Expose `linear`'s bias add (decompose), then fuse bias-add + GeLU into one module."""
    sch[linear].decompose()
    sch.trace(flatten=True)
    (subgraph,) = sch.find(lambda x, bias: F.gelu(x + bias))
    sch.fuse(subgraph, compiler=compiler, name="BiasGeLU")


def generate_pipeline_cuts(num_layers: int, num_stages: int) -> list[int]:
    """Indices of the blocks after which to cut, for `num_stages` near-equal stages."""
    if not 1 <= num_stages <= num_layers:
        raise ValueError(f"need 1 <= num_stages ({num_stages}) <= num_layers ({num_layers})")
    return [round(num_layers * (s + 1) / num_stages) - 1 for s in range(num_stages - 1)]
