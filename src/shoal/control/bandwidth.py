"""The bandwidth-adaptive controller: how much of each gradient crosses a slow link.

Across sites each leader sends a fixed-size sparse message per tensor (k values + k compact
indices, `shoal.runtime.compress`), and the leaders all-gather them. This module owns the wire
size of those messages (one formula, used by the codec and by the controller) and the decision
made from measurements: the keep ratio (fraction of a tensor's entries sent; StellaTrain's
compression rate c is 1 - keep) and, when even the sparsest message cannot hide, a larger
per-site batch so the compute grows to cover the exchange. It also owns the validators the run
configuration will call: the site spec, the keep ratio and the local-step count H.

The model is StellaTrain's simple one (SIGCOMM'24 §4): a ring all-gather makes each site send
(W - 1) messages over its link, so t_comm(keep) = (W - 1) * bytes(keep) / B, and communication
hides under compute when t_comm <= headroom * t_compute. B is the measured link throughput
(bytes sent / (exchange seconds - fixed cost), see `_fold`), and the fixed cost of an exchange
(latency; timed by the caller on a 1-byte exchange) is added to t_comm. Keep ratios come from
a geometric ladder; the controller moves down at once to the largest rung that fits when the
current one overruns (a slow exchange stalls every step), but up one rung only after
`patience_up` steps in which the rung above fits with margin: it follows a rate change within a
few steps and does not thrash on noise. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.errors import UserError

VALUE_BYTES = 4  # fp32 values on the wire
U16_MAX_NUMEL = 1 << 16  # a tensor this small indexes its entries in uint16
OVERHEAD_WINDOW = 8  # steps over which the smallest fixed-cost sample is kept
MIN_WIRE_SHARE = 0.1  # the wire time is taken as at least this share of the exchange
MAX_PATIENCE_FACTOR = 8  # failed probes up stretch the patience to at most 8 x patience_up


def validate_slow_link(keep_ratio: float | None = None, local_steps: int | None = None) -> None:
    """Reject a compression ratio outside (0, 1) or fewer than one local step (H)."""
    if keep_ratio is not None and not (0.0 < keep_ratio < 1.0):
        raise UserError(f"compression keep ratio must be in (0, 1), got {keep_ratio}")
    if local_steps is not None and (int(local_steps) != local_steps or local_steps < 1):
        raise UserError(f"local steps H must be an integer >= 1, got {local_steps}")


def parse_compress(spec: str) -> tuple[str, float | None]:
    """`--compress` as (mode, keep ratio): ("none", None), ("auto", None), ("topk", KEEP) or
    ("block", KEEP) for blocktopk:KEEP; KEEP must lie in (0, 1)."""
    mode, sep, keep = spec.partition(":")
    if mode in ("none", "auto") and not sep:
        return mode, None
    if mode in ("topk", "blocktopk") and keep:
        try:
            ratio = float(keep)
        except ValueError:
            raise UserError(f"--compress {spec}: KEEP must be a number") from None
        validate_slow_link(keep_ratio=ratio)
        return ("topk" if mode == "topk" else "block"), ratio
    raise UserError(f"--compress must be none, topk:KEEP, blocktopk:KEEP or auto, got {spec!r}")


def parse_sites(spec: str, num_workers: int) -> tuple[tuple[int, ...], ...]:
    """Sites from a spec such as "0,1/2,3" (worker indices, sites split by "/"): every site
    names at least one worker, and every worker is in exactly one site."""
    sites: list[tuple[int, ...]] = []
    for i, part in enumerate(spec.split("/")):
        names = [w.strip() for w in part.split(",") if w.strip()]
        if not names:
            raise UserError(f"site {i} of site spec {spec!r} names no worker")
        try:
            sites.append(tuple(int(w) for w in names))
        except ValueError:
            raise UserError(f"site spec {spec!r}: workers are indices, got {part!r}") from None
    seen = [w for site in sites for w in site]
    bad = sorted({w for w in seen if not 0 <= w < num_workers})
    if bad:
        raise UserError(f"site spec {spec!r} names workers {bad} outside 0..{num_workers - 1}")
    if len(seen) != len(set(seen)):
        raise UserError(f"site spec {spec!r} puts a worker in two sites")
    missing = sorted(set(range(num_workers)) - set(seen))
    if missing:
        raise UserError(f"site spec {spec!r} leaves workers {missing} in no site")
    return tuple(sites)


def index_bytes(numel: int) -> int:
    """Bytes per index on the wire: uint16 when every index fits, else int32."""
    return 2 if numel <= U16_MAX_NUMEL else 4


def entries(numel: int, keep_ratio: float) -> int:
    """k for one tensor: floor(numel * keep), at least one entry, at most every entry."""
    return max(1, min(numel, math.floor(numel * keep_ratio)))


def message_bytes(numel: int, k: int) -> int:
    """One packed message: k fp32 values then k compact indices."""
    return k * (VALUE_BYTES + index_bytes(numel))


def sent_bytes_per_site(sizes: Sequence[int], keep_ratio: float, num_sites: int) -> float:
    """Bytes one site puts on its link per step: ring all-gather of messages, or dense ring
    all-reduce (2 (W-1)/W of the gradient) at keep ratio 1."""
    if num_sites < 2:
        return 0.0
    if keep_ratio >= 1.0:
        return 2.0 * (num_sites - 1) / num_sites * VALUE_BYTES * sum(sizes)
    msg = sum(message_bytes(n, entries(n, keep_ratio)) for n in sizes)
    return float((num_sites - 1) * msg)


@dataclass(frozen=True)
class BandwidthConfig:
    """The controller's knobs; every one is validated so a bad value fails with one line."""

    headroom: float = 0.8  # communication may take this share of compute time
    up_margin: float = 0.7  # move up only if the rung above fits within up_margin * budget
    min_keep_ratio: float = 1e-3
    ladder_factor: float = 2.0  # neighbouring rungs differ by this factor
    patience_up: int = 3  # steps the rung above must fit before moving up
    smoothing: float = 0.5  # weight of a newest throughput sample that is higher than before
    max_batch_scale: float = 4.0  # per-site batch may grow up to this factor

    def __post_init__(self) -> None:
        if not 0.0 < self.headroom <= 1.0:
            raise UserError(f"bandwidth headroom must be in (0, 1], got {self.headroom}")
        if not 0.0 < self.up_margin <= 1.0:
            raise UserError(f"bandwidth up_margin must be in (0, 1], got {self.up_margin}")
        validate_slow_link(keep_ratio=self.min_keep_ratio)
        if self.ladder_factor <= 1.0:
            raise UserError(f"bandwidth ladder_factor must be > 1, got {self.ladder_factor}")
        if self.patience_up < 1:
            raise UserError(f"bandwidth patience_up must be >= 1, got {self.patience_up}")
        if not 0.0 < self.smoothing <= 1.0:
            raise UserError(f"bandwidth smoothing must be in (0, 1], got {self.smoothing}")
        if self.max_batch_scale < 1.0:
            raise UserError(f"max_batch_scale must be >= 1, got {self.max_batch_scale}")

    def ladder(self) -> tuple[float, ...]:
        """Keep ratios from dense (1.0) down to min_keep_ratio, one factor apart."""
        rungs = [1.0]
        while rungs[-1] / self.ladder_factor >= self.min_keep_ratio * (1 - 1e-12):
            rungs.append(rungs[-1] / self.ladder_factor)
        return tuple(rungs)


@dataclass(frozen=True)
class LinkSample:
    """One step's measurement at a site leader."""

    bytes_sent: float  # bytes this site put on its link for the exchange
    exchange_s: float  # wall time of the exchange
    compute_s: float  # forward + backward time of the step (what communication hides under)
    overhead_s: float = 0.0  # the exchange's fixed cost (latency), timed on a 1-byte exchange


@dataclass(frozen=True)
class Decision:
    keep_ratio: float  # 1.0: dense (no compression)
    batch_scale: float  # multiply the per-site batch by this (>= 1)
    link_bytes_per_s: float  # the smoothed throughput the decision used
    comm_s: float  # the model's exchange time at keep_ratio, before any batch scaling


class BandwidthController:
    """Chooses the keep ratio (and per-site batch scale) step by step from link measurements."""

    def __init__(self, sizes: Sequence[int], num_sites: int, config: BandwidthConfig | None = None):
        if num_sites < 1 or not sizes or min(sizes) < 1:
            raise UserError("bandwidth controller needs >= 1 site and non-empty tensors")
        self.sizes = tuple(int(n) for n in sizes)
        self.num_sites = num_sites
        self.config = config or BandwidthConfig()
        self.rungs = self.config.ladder()
        self.rung = 0  # start dense; the first measurement moves it down at once if needed
        self.link_bytes_per_s: float | None = None
        self.overhead_s = 0.0
        self._overheads: list[float] = []  # recent fixed-cost samples
        self._fits_above = 0  # consecutive steps in which the rung above fit with margin
        self._patience = self.config.patience_up
        self._since_up: int | None = None  # steps since the last move up

    @property
    def keep_ratio(self) -> float:
        return self.rungs[self.rung]

    def state_dict(self) -> dict:
        """Everything a decision depends on (JSON-safe): a joiner adopts it with the training
        state, so every worker decides the same next keep ratio from the same agreed sample."""
        return {
            "rung": self.rung,
            "link_bytes_per_s": self.link_bytes_per_s,
            "overheads": list(self._overheads),
            "fits_above": self._fits_above,
            "patience": self._patience,
            "since_up": self._since_up,
        }

    def load_state_dict(self, state: dict) -> None:
        self.rung = int(state["rung"])
        self.link_bytes_per_s = state["link_bytes_per_s"]
        self._overheads = [float(x) for x in state["overheads"]]
        self.overhead_s = min(self._overheads) if self._overheads else 0.0
        self._fits_above, self._patience = int(state["fits_above"]), int(state["patience"])
        self._since_up = state["since_up"]

    def comm_s(self, keep_ratio: float) -> float:
        """Model: seconds the exchange takes at this keep ratio: fixed cost + bytes / rate."""
        assert self.link_bytes_per_s is not None
        sent = sent_bytes_per_site(self.sizes, keep_ratio, self.num_sites)
        return self.overhead_s + sent / self.link_bytes_per_s

    def observe(self, sample: LinkSample) -> Decision:
        """Fold in one step's measurement; return the setting for the next step."""
        if (
            min(sample.exchange_s, sample.compute_s) <= 0
            or min(sample.bytes_sent, sample.overhead_s) < 0
        ):
            raise UserError(f"link sample needs positive times and bytes, got {sample}")
        budget = self.config.headroom * sample.compute_s
        # A fixed cost is the lower envelope of its samples: noise (scheduling) only adds to it.
        self._overheads = [*self._overheads[-(OVERHEAD_WINDOW - 1) :], sample.overhead_s]
        self.overhead_s = min(self._overheads)
        # An exchange no slower than its fixed cost says the link is fast: bound the wire time
        # below so the sample raises the estimate (by smoothing) instead of being lost.
        wire_s = max(sample.exchange_s - self.overhead_s, MIN_WIRE_SHARE * sample.exchange_s)
        if sample.bytes_sent > 0:
            self._fold(sample.bytes_sent / wire_s, sample.exchange_s, budget)
        if self.link_bytes_per_s is None:  # nothing crossed a link yet (one site)
            return Decision(self.keep_ratio, 1.0, 0.0, 0.0)
        self._move(budget)
        comm = self.comm_s(self.keep_ratio)
        scale = min(self.config.max_batch_scale, max(1.0, comm / budget))
        return Decision(self.keep_ratio, scale, self.link_bytes_per_s, comm)

    def _fold(self, rate: float, exchange_s: float, budget: float) -> None:
        """Update the throughput estimate. A drop is believed at once (a slow exchange stalls
        every step), a rise is smoothed. A well-hidden exchange (small messages) measures its
        fixed overheads more than the link, so it may raise the estimate but never lower it."""
        old = self.link_bytes_per_s
        if old is None or (rate < old and exchange_s > self.config.up_margin * budget):
            self.link_bytes_per_s = rate
        elif rate > old:
            self.link_bytes_per_s = self.config.smoothing * rate + (1 - self.config.smoothing) * old

    def _move(self, budget: float) -> None:
        """Down at once to the largest rung that fits; up one rung after `_patience` fits. A
        move up undone within patience_up steps doubles the patience (a failed probe is not
        retried every few steps); any other fall by two rungs or more is a new rate, and resets
        it."""
        if self._since_up is not None:
            self._since_up += 1
        if self.comm_s(self.keep_ratio) > budget:
            fitting = [
                i for i in range(self.rung, len(self.rungs)) if self.comm_s(self.rungs[i]) <= budget
            ]
            target = fitting[0] if fitting else len(self.rungs) - 1
            if self._since_up is not None and self._since_up <= self.config.patience_up:
                self._patience = min(
                    2 * self._patience, MAX_PATIENCE_FACTOR * self.config.patience_up
                )
            elif target - self.rung >= 2:
                self._patience = self.config.patience_up
            self.rung, self._fits_above = target, 0
            return
        above = self.rung - 1
        if above >= 0 and self.comm_s(self.rungs[above]) <= self.config.up_margin * budget:
            self._fits_above += 1
            if self._fits_above >= self._patience:
                self.rung, self._fits_above, self._since_up = above, 0, 0
        else:
            self._fits_above = 0
