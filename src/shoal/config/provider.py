"""Servers bought from a provider (issue 14), as configured: `ProviderConfig` and the parsers
of its values (durations, amounts in USD, KIND:TIER). Pure: no torch, no argparse."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from shoal.config.fields import at_least, option
from shoal.digits import ascii_digits
from shoal.errors import UserError

# [0-9], not \d: other scripts' digits are \d, and int() and float() read them ('２' is 2)
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h)?")
_UNITS = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
TIER_NAMES = ("on_demand", "spot")


# Emulated seconds per wall second: runs use 80 to 1,440. At 10^6 (11.6 days a wall second)
# every spot lifetime (24 h at most) is over within a poll; 1e300 billed $3.6e299 for 3 steps.
MAX_TIME_SCALE = 1e6
# and at least 10^-6 (a server's 60 s boot took two wall years): at 5e-324 the emulated
# micro-batch time underflowed to 0 ("a micro-batch time must be positive", no flag named)
MIN_TIME_SCALE = 1e-6
MAX_STARTUP_S = 86_400.0  # a server's boot: ICAC'19 measured 230-350 s; a day is generous
# --scale-every's floor, the same as a scenario's (sim/scenario.py MIN_SCALE_EVERY_S): the run
# writes it into OUT/scenario.json, whose replay decides every tick (~3 ms each; 1e-9 hung it)
MIN_SCALE_EVERY_S = 1.0
# and its ceiling, a day (spot lifetimes are measured within a day): past it, the scaler never
# re-decided and the give-up bound for workers that keep failing (6 x the cadence) never came
MAX_SCALE_EVERY_S = 86_400.0


def parse_duration(text: str, flag: str) -> float:
    """`45m`, `2h`, `900s` or `900` (seconds) -> seconds; one line naming the flag otherwise."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not m or not float(m[1]) > 0:
        raise UserError(f"{flag}: expected a duration such as 45m, 2h or 900s, got {text!r}")
    return float(m[1]) * _UNITS[m[2]]


def parse_usd(text: str, flag: str) -> float:
    """`2.50usd`, `$2.5` or `2.5` -> 2.5."""
    raw = text.strip().lower().removeprefix("$").removesuffix("usd").strip()
    try:
        value = float(ascii_digits(raw))
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise UserError(f"{flag}: expected an amount such as 2.50usd, got {text!r}")
    return value


def _kind_tier(text: str, flag: str) -> tuple[str, str]:
    kind, _, tier = text.strip().lower().partition(":")
    tier = tier.replace("-", "_")  # named: `k80:0-10` was taken as on-demand, silently
    if not kind or tier not in TIER_NAMES:
        raise UserError(f"{flag}: expected KIND:TIER (tier on_demand or spot), got {text!r}")
    return kind, tier


def split_tiers(workers: str) -> tuple[str, list[str]]:
    """`2xk80:spot,v100` -> ("2xk80,v100", ["spot", "spot", "on_demand"])."""
    plain, tiers = [], []
    for item in (s.strip() for s in workers.split(",")):
        body, _, tier = item.partition(":")
        tier = tier.strip().lower().replace("-", "_") or "on_demand"
        if tier not in TIER_NAMES:
            raise UserError(f"--workers: bad tier in {item!r} (on_demand or spot)")
        count = re.match(r"\s*([0-9]+)\s*[x*]", body)
        tiers += [tier] * (int(count[1]) if count else 1)
        plain.append(body)
    return ",".join(plain), tiers


def flags_given(value) -> list[str]:
    """The flags of ProviderConfig's fields whose `value(name)` is not the default (a repeatable
    flag left out: an empty list or tuple)."""
    given = []
    for f in dataclasses.fields(ProviderConfig):
        v = value(f.name)
        if v != f.default and not (f.default == () and not v):
            given.append(f.metadata["flag"])
    return given


@dataclass(frozen=True)
class ProviderConfig:
    """Servers bought from a provider (issue 14): the emulated local one, its spot revocations,
    the autoscaler's goal. All times are emulated seconds (`time_scale` of them per wall second),
    prices USD per emulated hour. Without `--provider` none of this is used."""

    name: str | None = field(
        default=None,
        metadata=option(
            "--provider",
            "buy the workers from a provider: local (emulated, with spot revocations)",
            choices=("local",),
        ),
    )
    autoscale: bool = field(
        default=False,
        metadata=option("--autoscale", "let the scaler choose the mix of servers (needs a goal)"),
    )
    deadline: str | None = field(
        default=None,
        metadata=option(
            "--deadline", "autoscale: the cheapest mix finishing by then", metavar="DURATION"
        ),
    )
    budget: str | None = field(
        default=None,
        metadata=option(
            "--budget", "autoscale: the fastest mix spending at most this", metavar="AMOUNT"
        ),
    )
    spot_lifetimes: str | None = field(
        default=None,
        metadata=option(
            "--spot-lifetimes",
            "spot lifetime models per kind, e.g. k80:gce,v100:p3 (default gce)",
            metavar="SPEC",
        ),
    )
    spot_trace: str | None = field(
        default=None,
        metadata=option(
            "--spot-trace", "spot lifetimes from a trace file (Bamboo or kind,lifetime_s)",
            metavar="FILE",
        ),
    )  # fmt: skip
    kinds: str | None = field(
        default=None,
        metadata=option(
            "--kinds",
            "kinds the scaler may buy (default: those of --workers); the fastest of them is "
            "the emulation's yardstick, so that runs of different mixes compare",
            metavar="KINDS",
        ),
    )
    time_scale: float = field(
        default=1.0,
        metadata=option(
            "--time-scale",
            "emulated seconds per wall second (default 1, from 10^-6 to 10^6)",
            metavar="X",
        ),
    )
    max_servers: int = field(
        default=8,
        metadata=option(
            "--max-servers",
            "at most N servers at once (each a local process: at most 8 per CPU core, 16 at least)",
            metavar="N",
        ),
    )
    scale_every_s: float = field(
        default=600.0,
        metadata=option(
            "--scale-every",
            "re-decide the mix every S emulated seconds (from 1 to 86,400)",
            metavar="SECONDS",
        ),
    )
    startup_s: float = field(
        default=60.0,
        metadata=option(
            "--startup",
            "emulated seconds from a request to a ready server (at most 86,400)",
            metavar="SECONDS",
        ),
    )
    notice: str = field(
        default="30",
        metadata=option(
            "--notice",
            "emulated seconds of warning before a spot revocation, or none",
            metavar="SECONDS|none",
        ),
    )
    quota: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--quota", "at most N servers of a kind and tier (repeatable)", metavar="KIND:TIER=N"
        ),
    )
    outages: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--outage",
            "no capacity of a kind and tier from A to B emulated seconds (repeatable)",
            metavar="KIND:TIER:A-B",
        ),
    )
    seed: int = field(
        default=0,
        metadata=option("--provider-seed", "seed of the revocations (default 0)", metavar="N"),
    )
    recovery: str = field(
        default="peers",
        metadata=option(
            "--recovery",
            "after a revocation: peers (the survivors go on, shoal's own) or restart (every "
            "worker stops and the job restarts on fresh servers from the last durable "
            "checkpoint, as SkyPilot's managed spot does)",
            choices=("peers", "restart"),
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "quota", tuple(self.quota))
        object.__setattr__(self, "outages", tuple(self.outages))
        if self.name is None:
            given = flags_given(lambda name: getattr(self, name))
            if given:
                raise UserError(f"{given[0]} needs --provider local")
            return
        if self.name != "local":
            raise UserError(f"--provider: unknown provider {self.name!r} (known: local)")
        if self.kinds is not None and not self.kind_list:  # told as "the provider offers no kind"
            raise UserError(f"--kinds names no kind, got {self.kinds!r}")
        if self.deadline is not None and self.budget is not None:
            raise UserError("--deadline and --budget: give one goal, not both")
        goal = self.deadline_s is not None or self.budget_usd is not None
        if self.autoscale and not goal:
            raise UserError("--autoscale needs a goal: --deadline DURATION or --budget AMOUNT")
        if goal and not self.autoscale:
            raise UserError("--deadline and --budget are the scaler's goal: add --autoscale")
        if not self.time_scale > 0 or math.isinf(self.time_scale):
            raise UserError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.time_scale > MAX_TIME_SCALE:
            raise UserError(f"--time-scale {self.time_scale!r}: at most {MAX_TIME_SCALE:,.0f}")
        if self.time_scale < MIN_TIME_SCALE:
            raise UserError(f"--time-scale {self.time_scale!r}: at least {MIN_TIME_SCALE:g}")
        if self.recovery not in ("peers", "restart"):
            raise UserError(f"--recovery must be peers or restart, got {self.recovery!r}")
        if self.recovery == "restart" and self.autoscale:
            raise UserError("--recovery restart holds the --workers mix: drop --autoscale")
        at_least(self.max_servers, 1, "--max-servers")
        if not 0 <= self.startup_s <= MAX_STARTUP_S:  # 1e300 was taken: a 300-digit finish
            raise UserError(
                f"--startup must be from 0 to {MAX_STARTUP_S:,.0f} s, got {self.startup_s:g}"
            )
        if not MIN_SCALE_EVERY_S <= self.scale_every_s <= MAX_SCALE_EVERY_S:
            raise UserError(
                f"--scale-every must be from {MIN_SCALE_EVERY_S:g} to {MAX_SCALE_EVERY_S:,.0f} "
                f"(emulated seconds), got {self.scale_every_s:g}"
            )
        self.notice_s, self.quota_map, self.outage_list  # noqa: B018 (each checks its flag)

    @property
    def deadline_s(self) -> float | None:
        return None if self.deadline is None else parse_duration(self.deadline, "--deadline")

    @property
    def budget_usd(self) -> float | None:
        return None if self.budget is None else parse_usd(self.budget, "--budget")

    @property
    def notice_s(self) -> float | None:
        if self.notice.strip().lower() == "none":
            return None
        try:
            value = float(ascii_digits(self.notice))
        except ValueError:
            value = math.nan
        if not 0 <= value < math.inf:  # inf: a notice at the lease's start, no revocation
            raise UserError(f"--notice: expected seconds or none, got {self.notice!r}")
        return value

    @property
    def kind_list(self) -> tuple[str, ...]:
        return tuple(k.strip().lower() for k in (self.kinds or "").split(",") if k.strip())

    @property
    def quota_map(self) -> dict[tuple[str, str], int]:
        out = {}
        for item in self.quota:
            key, _, n = item.partition("=")
            n = n.strip()
            if not (n.isascii() and n.isdigit()):  # int('²') fails
                raise UserError(f"--quota: expected KIND:TIER=N, got {item!r}")
            kind_tier = _kind_tier(key, "--quota")
            if kind_tier in out:  # the last one was kept without a word
                raise UserError(f"--quota: {':'.join(kind_tier)} given twice")
            out[kind_tier] = int(n)
        return out

    @property
    def outage_list(self) -> tuple[tuple[str, str, float, float], ...]:
        out = []
        for item in self.outages:
            key, _, span = item.rpartition(":")
            a, _, b = span.partition("-")
            try:
                lo, hi = float(ascii_digits(a)), float(ascii_digits(b))
            except ValueError:
                raise UserError(f"--outage: expected KIND:TIER:A-B, got {item!r}") from None
            if not (math.isfinite(lo) and math.isfinite(hi)):  # 1e400: an outage never over
                raise UserError(f"--outage {item}: A and B must be finite (emulated seconds)")
            if not 0 <= lo <= hi:  # was the provider's words, naming no flag
                raise UserError(f"--outage {item}: needs 0 <= A <= B (emulated seconds)")
            out.append((*_kind_tier(key, "--outage"), lo, hi))
        return tuple(out)
