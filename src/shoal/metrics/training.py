"""The lines every run writes to `metrics.jsonl`: one per completed training step (`StepLine`,
each worker's part of it a `WorkerShare`) and one per change of the group (`MembershipEvent`:
join, notice, leave, fail, stall, recover).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shoal.errors import UserError
from shoal.metrics.fields import Fields, drop_none

EVENT_KINDS = ("join", "leave", "fail", "notice", "stall", "recover")


@dataclass(frozen=True)
class WorkerShare:
    """One worker's part of one step: its micro-batches and its seconds per micro-batch."""

    id: str
    rank: int | None = None
    device: str | None = None
    micro_batches: int = 0
    micro_batch_time_s: float | None = None  # None: it computed nothing this step

    def to_json(self) -> dict[str, Any]:
        out = drop_none(self)
        if self.micro_batch_time_s is None:
            out["micro_batch_time_s"] = None  # written as today: the key is always there
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str = "worker share") -> WorkerShare:
        if not isinstance(raw, dict):
            raise UserError(f"{where} must be an object, got {raw!r}")
        f = Fields(raw, where)
        micro_batches = f.int_("micro_batches") or 0
        if micro_batches < 0:
            raise f.fail(f"'micro_batches' must be >= 0, got {micro_batches}")
        return cls(
            id=f.str_("id", required=True) or "",
            rank=f.int_("rank"),
            device=f.str_("device"),
            micro_batches=micro_batches,
            micro_batch_time_s=f.float_("micro_batch_time_s"),
        )


@dataclass(frozen=True)
class StepLine:
    """One completed training step, written by rank 0 of the group that computed it."""

    step: int
    loss: float | None = None
    global_batch_size: int | None = None
    micro_batch_size: int | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    wall_time_s: float | None = None  # since the run (this process of it) started
    redone: int | None = None  # exact-mode recomputations of the step (a bound overflowed)
    skipped: bool | None = None  # true: its update skipped (--on-nonfinite skip, a loss scale)
    grad_norm: float | None = None  # Job.clip_grad_norm set: the gradient's norm before clipping
    loss_scale: float | None = None  # Job.loss_scale set: the scale of the step's losses
    generation: int | None = None
    workers: tuple[WorkerShare, ...] = ()
    # adaptive batch (None when not measured): the smoothed gradient noise scale (samples),
    # the cosine between the step's two halves, the learning-rate factor applied to the step
    noise_scale: float | None = None
    similarity: float | None = None
    lr_factor: float | None = None
    # --compress (None otherwise): the keep ratio used, the measured link throughput, the
    # bytes one site put on its link and the seconds of the exchange across sites
    keep_ratio: float | None = None
    link_mbit_s: float | None = None
    sent_bytes: int | None = None
    exchange_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"kind": "step", **drop_none(self)}
        out["workers"] = [w.to_json() for w in self.workers]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "step line") -> StepLine:
        f = Fields(obj, where)
        raw_workers = f.list_("workers")
        return cls(
            step=f.int_("step", required=True) or 0,
            loss=f.float_("loss"),
            global_batch_size=f.int_("global_batch_size"),
            micro_batch_size=f.int_("micro_batch_size"),
            step_time_s=f.float_("step_time_s"),
            samples_per_s=f.float_("samples_per_s"),
            wall_time_s=f.float_("wall_time_s", wall=True),
            redone=f.int_("redone"),
            skipped=f.bool_("skipped"),
            grad_norm=f.float_("grad_norm"),
            loss_scale=f.float_("loss_scale"),
            generation=f.int_("generation"),
            workers=tuple(
                WorkerShare.from_json(w, f"{where}: workers[{i}]")
                for i, w in enumerate(raw_workers)
            ),
            noise_scale=f.float_("noise_scale"),
            similarity=f.float_("similarity"),
            lr_factor=f.float_("lr_factor"),
            keep_ratio=f.float_("keep_ratio"),
            link_mbit_s=f.float_("link_mbit_s"),
            sent_bytes=f.int_("sent_bytes"),
            exchange_s=f.float_("exchange_s"),
        )


@dataclass(frozen=True)
class MembershipEvent:
    """A worker joined, got a notice, left gracefully, failed, or the group recovered.

    `step` is the steps completed when it took effect; a recover event also carries the time
    from the change to the first step of the new group and the steps of work lost.
    """

    event: str
    worker: str
    device: str | None = None
    step: int | None = None
    wall_time_s: float | None = None
    recovery_time_s: float | None = None
    lost_steps: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "membership", **drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "membership line") -> MembershipEvent:
        f = Fields(obj, where)
        event = f.str_("event", required=True)
        if event not in EVENT_KINDS:
            raise f.fail(f"'event' must be one of {', '.join(EVENT_KINDS)}; got {event!r}")
        return cls(
            event=event,
            worker=f.str_("worker", required=True) or "",
            device=f.str_("device"),
            step=f.int_("step"),
            wall_time_s=f.float_("wall_time_s", wall=True),
            recovery_time_s=f.float_("recovery_time_s"),
            lost_steps=f.int_("lost_steps"),
            detail=f.str_("detail"),
        )
