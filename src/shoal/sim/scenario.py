"""A scenario: the record of one run of one job on the emulated provider, to replay it.

A `Scenario` is everything that decides a run's time and cost -- the job's profile (steps,
batch trajectory, seconds per micro-batch per kind, per-step overhead, the measured cost of a
membership change), the provider (`cluster.provider.EmulatedProvider`, seeded), the goal and
the scaler's settings. The live run writes one at its end (`OUT/scenario.json`, measured
values in it) and `shoal simulate --scenario` replays it (`replay.py`) with the SAME step-time
model (`step_time_model`, which the live scaler calls too).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields

from shoal.cluster.provider import provider_from_config
from shoal.control.mix_model import profile_step_time
from shoal.control.scaler import MAX_SERVERS, Goal
from shoal.errors import UserError, unreadable
from shoal.perf.devices import TIERS, load_devices

JOIN_WINDOW = 20  # the join delays the live driver's median is over (its measurement window)
# The shortest re-decision cadence, the live `--scale-every`'s bound too (config/provider.py's
# MIN_SCALE_EVERY_S: a live run's scenario must load). A decision costs the replay ~3 ms (the
# scaler weighs every mix), so a tick every 1e-9 s hung it (1 s of emulated time: 45 s at 0.1);
# at 1 s a day-long run decides 86,400 times, a few minutes. The default is 600 s.
MIN_SCALE_EVERY_S = 1.0
# The largest global batch: the micro-batch planner splits up to 10^18 in under a millisecond,
# past ~10^20 its float thresholds tie and it slows (10^30 samples hung the replay's first step)
MAX_BATCH = 10**18


@dataclass(frozen=True)
class Scenario:
    steps: int
    micro_batch_size: int
    batch: tuple[tuple[int, int], ...]  # (from_step, global_batch) pieces; fixed = ((0, B),)
    host_s: float  # emulated seconds of one micro-batch on the fastest kind
    slowdowns: dict[str, float]  # kind -> slowdown >= 1 (missing kinds: the device table's)
    step_overhead_s: float  # emulated seconds per step beyond compute
    change_cost_s: float  # emulated seconds lost per membership change
    provider: dict  # ProviderConfig as JSON
    goal: dict  # {"deadline_s": x} or {"budget_usd": y}
    max_servers: int = 8
    scale_every_s: float = 600.0
    autoscale: bool = True
    initial: dict[str, int] = field(default_factory=dict)  # "kind:tier" -> count (fixed mix)
    checkpoint_every_s: float = 600.0  # durable checkpoint cadence (the live default, 600 s)
    restart_from_checkpoint: bool = False  # SkyPilot-style: any revocation restarts the job
    initial_ready: bool = False  # the initial servers are ready at 0 (a live run writes True)
    # the live run's measured request -> admission delay (its median; 0: none measured): a
    # requested server joins at max(its lease's ready_s, request + this), and the scaler counts
    # that start-up, as the live driver does; the lease's lifetime still runs from ready_s
    join_delay_s: float = 0.0
    # the live run's joins as its scaler measured them, (admitted at t_s, delay_s) in order: the
    # replay's scaler counts the start-up the live one counted at the same time (the median of
    # the last JOIN_WINDOW delays admitted by then; --startup before the first), not the whole
    # run's median from the start (empty: join_delay_s throughout)
    join_delays: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["batch"] = [list(piece) for piece in self.batch]
        out["join_delays"] = [list(join) for join in self.join_delays]
        return out

    @classmethod
    def from_json(cls, data: object) -> Scenario:
        if not isinstance(data, dict):
            raise UserError("scenario: expected a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"scenario: unknown field {unknown[0]!r}")
        required = [f.name for f in fields(cls) if f.name not in data and _required(f)]
        if required:
            raise UserError(f"scenario: missing field {required[0]!r}")
        try:
            batch = tuple((a, b) for a, b in data["batch"])
        except (TypeError, ValueError):
            raise UserError("scenario: 'batch' must be a list of [from_step, batch]") from None
        if not all(_integer(a) and _integer(b) for a, b in batch):  # 1.9 was taken as 1
            raise UserError("scenario: 'batch' steps and batch sizes must be integers")
        try:
            joins = tuple((float(t), float(d)) for t, d in data.get("join_delays", ()))
        except (TypeError, ValueError):
            raise UserError("scenario: 'join_delays' must be a list of [t_s, delay_s]") from None
        return cls(**{**data, "batch": batch, "join_delays": joins})


def join_delay_at(joins, now_s: float = math.inf) -> float:
    """The join delay a scaler counts at `now_s`, from (admitted at, delay) pairs in order: the
    median of the last JOIN_WINDOW admitted by then (0 before the first). The live driver and
    the replay both count it so."""
    seen = [delay for t, delay in joins if t <= now_s][-JOIN_WINDOW:]
    return statistics.median(seen) if seen else 0.0


def _required(f) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(f"scenario: {message}")


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _validate(sc: Scenario) -> None:
    for name in ("steps", "micro_batch_size", "max_servers"):
        value = getattr(sc, name)
        _check(_integer(value), f"{name} must be an integer")
        _check(value >= 1, f"{name} must be >= 1")
    _check(bool(sc.batch) and sc.batch[0][0] == 0, "batch must start at step 0")
    starts = [a for a, _ in sc.batch]
    _check(starts == sorted(set(starts)), "batch pieces must start at increasing steps")
    _check(
        all(1 <= b <= MAX_BATCH for _, b in sc.batch),
        "every global batch must be from 1 to 10^18 samples",
    )
    for name in ("host_s", "scale_every_s", "checkpoint_every_s"):
        _check(_number(getattr(sc, name)) and getattr(sc, name) > 0, f"{name} must be > 0")
    _check(
        sc.scale_every_s >= MIN_SCALE_EVERY_S,
        f"scale_every_s must be >= {MIN_SCALE_EVERY_S:g} (emulated seconds), got "
        f"{sc.scale_every_s:g}",
    )
    for name in ("step_overhead_s", "change_cost_s", "join_delay_s"):
        _check(_number(getattr(sc, name)) and getattr(sc, name) >= 0, f"{name} must be >= 0")
    _check(
        all(_number(t) and _number(d) and d >= 0 for t, d in sc.join_delays),
        "join_delays must be [t_s, delay_s] pairs with delay_s >= 0",
    )
    _check(isinstance(sc.slowdowns, dict), "slowdowns must be an object kind -> slowdown")
    for kind, slow in sc.slowdowns.items():
        _check(_number(slow) and slow >= 1, f"slowdown of {kind!r} must be a number >= 1")
    for name in ("initial_ready", "autoscale", "restart_from_checkpoint"):  # "no" is truthy
        _check(isinstance(getattr(sc, name), bool), f"{name} must be true or false")
    _check(isinstance(sc.provider, dict), "provider must be an object")
    _check(isinstance(sc.goal, dict), "goal must be an object")
    _check(set(sc.goal) <= {"deadline_s", "budget_usd"}, "goal takes deadline_s or budget_usd")
    _check(all(_number(v) for v in sc.goal.values()), "goal values must be numbers")
    if sc.autoscale or sc.goal:  # a fixed mix needs no goal (a live fixed run writes {})
        Goal(**sc.goal)
    provider = provider_from_config(sc.provider)
    _check(isinstance(sc.initial, dict), "initial must be an object 'kind:tier' -> count")
    for key in initial_counts(sc):
        _check(key[0] in provider.kinds, f"initial kind {key[0]!r} is not in the provider's kinds")
    _check(sc.autoscale or bool(initial_counts(sc)), "a fixed mix (autoscale off) needs initial")
    n = initial_counts(sc).total()  # as live --workers (the replay's fill stops at the bound)
    _check(n <= sc.max_servers, f"initial holds {n:,} servers, above max_servers {sc.max_servers}")
    kind_slowdowns(sc.slowdowns, provider.kinds)


def initial_counts(sc: Scenario) -> Counter:
    """`initial` as {(kind, tier): count}."""
    out: Counter = Counter()
    for key, n in sc.initial.items():
        kind, _, tier = str(key).partition(":")
        _check(tier in TIERS, f"initial key {key!r} must be KIND:on_demand or KIND:spot")
        _check(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"bad count for {key}")
        if n:
            out[(load_devices().check(kind), tier)] += n
    # a live run's initial servers are its --workers processes; a replay acquires them one by
    # one (999,999,999 took gigabytes and hung)
    _check(
        out.total() <= MAX_SERVERS,
        f"initial holds {out.total():,} servers, at most {MAX_SERVERS:,}",
    )
    return out


def kind_slowdowns(slowdowns: Mapping[str, float], kinds: tuple[str, ...]) -> dict[str, float]:
    """Each kind's slowdown: the given one, else the device table's speed relative to the
    fastest of the provider's kinds (what the launcher emulates)."""
    devices = load_devices()
    out = {devices.check(k): float(v) for k, v in slowdowns.items()}
    missing = [k for k in kinds if k not in out]
    if missing:
        speed = {k: devices.workload_speed(k) for k in kinds}
        for kind in missing:
            out[kind] = max(speed.values()) / speed[kind]
    return out


def step_time_model(sc: Scenario) -> Callable[[Mapping[str, int], int], float]:
    """(GPUs per kind, global batch) -> seconds per step of the scenario's job: the scaler's
    `profile_step_time` (the shared step-time model's split of ceil(batch / micro_batch_size)
    micro-batches over GPUs at host_s x slowdown each, plus the per-step overhead). The live
    driver calls `profile_step_time` with the same numbers, without building a Scenario."""
    slow = kind_slowdowns(sc.slowdowns, provider_from_config(sc.provider).kinds)
    return profile_step_time(sc.micro_batch_size, sc.host_s, slow, sc.step_overhead_s)


def load_scenario(path: str) -> Scenario:
    """A scenario file (`Scenario.to_json` as JSON); UserError naming the file when bad, an
    impossible goal included (the replay's own check, made here so that it names the file)."""
    import json
    from pathlib import Path

    from shoal.json_input import loads
    from shoal.sim.replay import check_scenario_goal  # replay imports this module

    if not path:  # Path("") is the working directory
        raise UserError("--scenario: expected a file name, got ''")
    try:
        # a byte-order mark is skipped, as in workload files (an editor's UTF-8 with BOM)
        data = loads(Path(path).read_text(encoding="utf-8-sig"), float_ints=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--scenario {path}: {unreadable(exc)}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"--scenario {path}:{exc.lineno}: not JSON ({exc.msg})") from None
    except ValueError as exc:  # nested too deeply, an integer no float holds
        raise UserError(f"--scenario {path}: not JSON ({exc})") from None
    try:
        sc = Scenario.from_json(data)
        check_scenario_goal(sc)
    except UserError as exc:
        raise UserError(f"--scenario {path}: {exc}") from None
    return sc
