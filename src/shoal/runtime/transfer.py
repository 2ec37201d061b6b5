"""Bringing every member of a new group to the newest training state any of them holds.

At a step boundary every data-parallel worker holds the whole state, so a new group needs no
disk: members agree (all-reduce MAX) on the newest step held, and the lowest rank holding it
broadcasts its state (serialised with torch.save, loaded with weights_only=True) unless every
member already holds that step (members that completed the same steps are bitwise equal).
Only if nobody holds any state does the group fall back to a durable checkpoint or spool.
The planner's measured speeds travel too (from the same member), so the group plans as one.

That members of one step are equal rests on every worker building the same model: the step's
one message lays out the gradients in parameter order, and a state moves by names. A build
that differs per process (a model made by iterating over a set, whose order follows the
process's string hashes, or initialized from the time) would train on silently, so every
sync first compares the members' parameter and buffer names, dtypes and shapes, in order, and
a fresh start their initial values too (`_check_same_build`).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable

import torch
import torch.distributed as dist

from shoal.errors import UserError
from shoal.runtime.membership import broadcast_bytes, collective
from shoal.runtime.state import load_training_state, state_sha256, training_state


def serialize(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def deserialize(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def sync_state(
    trainer,
    has_state: bool,
    fallback: Callable[[], dict | None],
    device: torch.device,
    attempted_step: int = -1,
) -> tuple[str, int]:
    """Make every member's state the newest held.

    `attempted_step` is the step this worker was computing when its last group broke (-1 if
    none). Returns (where the state came from, steps of work lost).
    """
    world = dist.get_world_size() if dist.is_initialized() else 1

    def agree_max(values: list[int]) -> list[int]:
        t = torch.tensor(values, dtype=torch.int64, device=device)
        if world > 1:
            collective(dist.all_reduce, t, op=dist.ReduceOp.MAX)
        return [int(v) for v in t]

    mine = trainer.step if has_state else -1
    fresh = agree_max([mine])[0] < 0
    if world > 1:
        _check_same_build(trainer, fresh, agree_max)
    if fresh:  # nobody holds state: the spool or durable checkpoint, if any
        saved = fallback()
        if saved is not None:
            load_training_state(trainer, saved)
            mine = trainer.step
    newest, neg_oldest, attempted = agree_max([mine, -mine, attempted_step])
    oldest = -neg_oldest
    lost = max(0, attempted + 1 - max(newest, 0)) if attempted >= 0 else 0
    if newest == oldest:
        source, src_rank = ("local" if newest >= 0 else "fresh"), 0
    else:
        src_rank = _newest_holder(mine == newest, world, device)
        data = serialize(training_state(trainer)) if dist.get_rank() == src_rank else None
        received = broadcast_bytes(data, src_rank, device)
        if dist.get_rank() != src_rank:
            load_training_state(trainer, deserialize(received))
        source = f"peer rank {src_rank}"
    if world > 1:
        _agree_speeds(trainer, src_rank, device)
    return source, lost


def _check_same_build(trainer, fresh: bool, agree_max: Callable) -> None:
    """Refuse a group whose members built different models: their layouts (names, dtypes,
    shapes, in order) and, at a fresh start, their initial states."""
    model = trainer.model
    tensors = [*model.named_parameters(), *model.named_buffers()]
    layout = json.dumps([(name, str(t.dtype), tuple(t.shape)) for name, t in tensors])
    digests = [hashlib.sha256(layout.encode()).hexdigest()]
    if fresh:
        digests.append(state_sha256(model, trainer.optimizer))
    values = [int(d[:15], 16) for d in digests]  # 60 bits: an int64
    agreed = agree_max(values + [-v for v in values])
    if agreed[: len(values)] != [-v for v in agreed[len(values) :]]:
        what = "layouts" if agreed[0] != -agreed[len(values)] else "initial values"
        raise UserError(
            f"the workers built Job.model with different {what}: the factory must build the "
            "same model on every worker (not iterate over a set, whose order differs between "
            "processes, nor seed from the time or the process)"
        )


def _newest_holder(holds_newest: bool, world: int, device: torch.device) -> int:
    """The lowest rank that holds the newest state."""
    src = torch.tensor([dist.get_rank() if holds_newest else world], dtype=torch.int64)
    src = src.to(device)
    collective(dist.all_reduce, src, op=dist.ReduceOp.MIN)
    return int(src)


def _agree_speeds(trainer, src_rank: int, device: torch.device) -> None:
    """Every member adopts `src_rank`'s measured speeds: members must plan the same split, and
    a newcomer (or a worker that joined later) has measured less than the others. Speeds only
    move work between workers, so whose are adopted never changes a bit of the result."""
    rank = dist.get_rank()
    data = json.dumps(trainer.rebalancer.state_dict()).encode() if rank == src_rank else None
    received = broadcast_bytes(data, src_rank, device)
    if rank != src_rank:
        trainer.rebalancer.load_state_dict(json.loads(received))
