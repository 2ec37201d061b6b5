"""The lines a run that buys its servers from a provider adds to `metrics.jsonl`: a lease
opened or closed (`LeaseLine`, with the charge of each closed one) and the spend so far at each
scaler decision and at the end (`CostLine`), from which the report draws and checks the cost.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from shoal.metrics.fields import Fields, drop_none

_MAX = sys.float_info.max


@dataclass(frozen=True)
class LeaseLine:
    """A server bought from a provider was opened (requested: billing starts) or closed (released,
    revoked, or at the run's end: billing stops). Times `t_s` are emulated seconds since launch;
    a close carries the lease's charge, `usd`, so the ledger can be checked line by line."""

    action: str  # open | close
    server: str
    device: str | None = None
    tier: str | None = None  # on_demand | spot
    usd_per_hour: float | None = None
    t_s: float | None = None
    worker: str | None = None  # the worker it runs (None while it boots)
    cause: str | None = None  # close: released | revoked | end
    usd: float | None = None
    wall_time_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "lease", **drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "lease line") -> LeaseLine:
        f = Fields(obj, where)
        action = f.str_("action", required=True)
        if action not in ("open", "close"):
            raise f.fail(f"'action' must be open or close; got {action!r}")
        return cls(
            action=action,
            server=f.str_("server", required=True) or "",
            device=f.str_("device"),
            tier=f.str_("tier"),
            usd_per_hour=f.float_("usd_per_hour"),
            t_s=f.float_("t_s"),
            worker=f.str_("worker"),
            cause=f.str_("cause"),
            usd=f.float_("usd"),
            wall_time_s=f.float_("wall_time_s"),
        )


def _numbers(f: Fields, key: str) -> dict[str, float]:
    """An object of finite numbers (NaN, inf and 10^400 were taken, or were tracebacks)."""
    value = f.obj.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and -_MAX <= v <= _MAX
        for v in value.values()
    ):
        raise f.fail(f"'{key}' must be an object of finite numbers, got {_short(value)}")
    return {str(k): float(v) for k, v in value.items()}


def _counts(f: Fields, key: str) -> dict[str, int]:
    """An object of whole numbers >= 0 (a mix's servers: 1.5 was taken as 1, inf a traceback)."""
    numbers = _numbers(f, key)
    if not all(n >= 0 and n.is_integer() for n in numbers.values()):
        raise f.fail(f"'{key}' must be an object of counts >= 0, got {_short(f.obj.get(key))}")
    return {k: int(n) for k, n in numbers.items()}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


@dataclass(frozen=True)
class CostLine:
    """The spend so far (USD, emulated time `t_s`) at a scaler decision and at the end: by
    device kind, the mix held ("kind:tier" -> servers), and the decision's projection;
    `over_budget` when the decision found no mix finishing within the --budget (the projection
    is then the cheapest mix's, and the run goes on at it), `past_deadline` when it found no
    mix finishing by the --deadline (the projection is then the fastest mix's)."""

    t_s: float
    usd: float
    by_kind: dict[str, float] = field(default_factory=dict)
    mix: dict[str, int] = field(default_factory=dict)
    projected_finish_s: float | None = None
    projected_usd: float | None = None
    wall_time_s: float | None = None
    over_budget: bool | None = None  # true: no mix finishes within the budget (else left out)
    past_deadline: bool | None = None  # true: no mix finishes by the deadline (else left out)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "cost", **drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "cost line") -> CostLine:
        f = Fields(obj, where)
        return cls(
            t_s=f.float_("t_s", required=True) or 0.0,
            usd=f.float_("usd", required=True) or 0.0,
            by_kind=_numbers(f, "by_kind"),
            mix=_counts(f, "mix"),
            projected_finish_s=f.float_("projected_finish_s"),
            projected_usd=f.float_("projected_usd"),
            wall_time_s=f.float_("wall_time_s"),
            over_budget=f.bool_("over_budget"),
            past_deadline=f.bool_("past_deadline"),
        )
