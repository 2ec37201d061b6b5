"""The lease book of `shoal run --provider local`: the servers held, their workers, their cost.

The autoscaler (`autoscale.Driver`) decides what to buy and let go; the book records it. It
holds the open leases of the servers bought from the provider (`shoal.cluster.provider`), which
worker runs on which server, and which servers are under a revocation notice or leaving, and it
bills them per second in a `CostLedger`: a lease from its request (a booting server is billed)
to its close (released, revoked, or the run's end), at its price per emulated hour. Each open
and close is a lease line in `metrics.jsonl`; at each decision and at the end a cost line has
the spend so far, by kind, and the mix held; at the end `result.json` gets the cost block.

A resumed run (`--resume`) goes on from the earlier attempts' lease and cost lines
(`cluster.ledger.carry_over`): their spend by kind and tier, their revocations, the provider's
server numbering, and the emulated clock (`offset_s`); a lease an attempt killed hard left open
is billed to the last time seen and closed (`end`) at the launch.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections import Counter

from shoal.cluster.ledger import Carried, CostLedger, carry_over
from shoal.cluster.provider import EmulatedProvider, Lease
from shoal.control.mix_model import Mix
from shoal.errors import UserError
from shoal.metrics.cost import CostLine, LeaseLine
from shoal.metrics.files import METRICS_FILE, RESULT_FILE, read_metrics
from shoal.runtime.outputs import append_line, write_json_atomic


def no_capacity(kind: str, tier: str) -> str:
    return f"--workers: the provider has no {kind}:{tier} capacity at launch"


def lease_label(counts: dict[tuple[str, str], int]) -> str:
    return ", ".join(f"{n}x{k}:{t}" for (k, t), n in sorted(counts.items()) if n) or "nothing"


def _carry(out: str) -> Carried:
    """--resume: the earlier attempts' lease and cost records, so the ledger goes on."""
    path = pathlib.Path(out) / METRICS_FILE
    records = list(read_metrics(path)) if path.is_file() else []
    leases = [r.to_json() for r in records if isinstance(r, LeaseLine)]
    return carry_over(leases, [r.t_s for r in records if isinstance(r, CostLine)])


class LeaseBook:
    """The open leases, the workers on them, and the run's spend (see the module's docstring).
    Its lines go to the controller's metrics file, timed from its t0 (`ctl`, set by the driver;
    None for the launch check, which writes nothing)."""

    def __init__(self, provider: EmulatedProvider, out: str, resume: bool) -> None:
        self.provider = provider
        self.ctl = None
        self.ledger = CostLedger()
        self.leases: dict[str, Lease] = {}  # open leases by server
        self.worker_of: dict[str, str] = {}  # server -> worker id
        self.server_of: dict[str, str] = {}
        self.noticed: set[str] = set()
        self.leaving: set[str] = set()  # servers whose worker was asked to leave
        self.carried = _carry(out) if resume else Carried()
        self.offset_s = self.carried.end_s  # a resumed run's clock goes on from the last one
        self.revocations = self.carried.revocations
        self.by_kind: dict[str, float] = dict(self.carried.usd_by_kind)
        self.by_tier: dict[str, float] = dict(self.carried.usd_by_tier)
        for kind, usd in self.carried.usd_by_kind.items():
            self.ledger.charge(kind, usd)
        self.provider.continue_numbering(self.carried.servers)

    def open_initial(self, kinds: list[str], tiers: list[str]) -> None:
        """The --workers servers, requested at launch for the workers w0, w1, ... the
        controller starts next (their processes' start-up stands in for the boot)."""
        for start, usd in self.carried.unclosed:  # a hard-killed attempt's: billed to its end
            line = LeaseLine(
                "close", start["server"], start["device"], start["tier"], start["usd_per_hour"],
                self.carried.end_s, start.get("worker"), "end", usd, time.time() - self.ctl.t0,
            )  # fmt: skip
            append_line(self.ctl.metrics, line)
        for i, (kind, tier) in enumerate(zip(kinds, tiers, strict=True)):
            lease = self.provider.request(kind, tier, self.offset_s)
            if lease is None:
                raise UserError(no_capacity(kind, tier))
            self.bind(lease.server, f"w{i}")
            self.open(lease)

    def check_initial(self, kinds: list[str], tiers: list[str]) -> None:
        """The --workers servers can be had at launch (no outage, within each quota): checked
        before any worker starts too, where a fresh run directory had its metrics and logs."""
        for (kind, tier), n in sorted(Counter(zip(kinds, tiers, strict=True)).items()):
            if self.provider.available(kind, tier, self.offset_s) < n:
                raise UserError(no_capacity(kind, tier))

    def open(self, lease: Lease) -> None:
        self.leases[lease.server] = lease
        self.ledger.open(lease.server, lease.kind, lease.usd_per_hour, lease.requested_s)
        self._lease_line("open", lease, lease.requested_s)

    def bind(self, server: str, wid: str) -> None:
        self.worker_of[server], self.server_of[wid] = wid, server

    def close(self, server: str, t_s: float, cause: str) -> None:
        lease = self.leases.pop(server)
        usd = self.ledger.close(server, max(t_s, lease.requested_s))
        self.by_kind[lease.kind] = self.by_kind.get(lease.kind, 0.0) + usd
        self.by_tier[lease.tier] = self.by_tier.get(lease.tier, 0.0) + usd
        self.provider.release(server, t_s)
        self.leaving.discard(server)
        self._lease_line("close", lease, max(t_s, lease.requested_s), cause, usd)

    def _lease_line(self, action, lease: Lease, t_s, cause=None, usd=None) -> None:
        line = LeaseLine(
            action, lease.server, lease.kind, lease.tier, lease.usd_per_hour, t_s,
            self.worker_of.get(lease.server), cause, usd, time.time() - self.ctl.t0,
        )  # fmt: skip
        append_line(self.ctl.metrics, line)

    def held(self) -> dict[tuple[str, str], int]:
        """Servers held and staying (booting or running; not revoked, noticed or leaving)."""
        out: dict[tuple[str, str], int] = {}
        for server, lease in self.leases.items():
            if server not in self.noticed and server not in self.leaving:
                out[(lease.kind, lease.tier)] = out.get((lease.kind, lease.tier), 0) + 1
        return out

    def spent(self, now_s: float) -> float:
        open_usd = sum(
            lease.usd_per_hour * max(0.0, now_s - lease.requested_s) / 3600.0
            for lease in self.leases.values()
        )
        return sum(self.by_kind.values()) + open_usd

    def cost_line(self, now: float, mix: Mix | None, misses: dict[str, bool]) -> float:
        """The cost line: the spend at `now` by kind, the mix held, and the decision's
        projection (`mix`; None: not a decision), with the goal it misses (`Goal.misses`).
        Returns the spend."""
        spent = self.spent(now)
        by_kind = dict(self.by_kind)
        for lease in self.leases.values():
            usd = lease.usd_per_hour * max(0.0, now - lease.requested_s) / 3600.0
            by_kind[lease.kind] = by_kind.get(lease.kind, 0.0) + usd
        held = {f"{k}:{t}": n for (k, t), n in sorted(self.held().items())}
        finish = mix.finish_s if mix else None
        line = CostLine(
            now, spent, by_kind, held, finish, mix.cost_usd if mix else None,
            time.time() - self.ctl.t0, **misses,
        )  # fmt: skip
        append_line(self.ctl.metrics, line)
        return spent

    def close_all(self, now: float, out: pathlib.Path) -> None:
        """The end: every lease closed at `now`, the last cost line, result.json's cost block."""
        for server in list(self.leases):
            self.close(server, now, "end")
        self.cost_line(now, None, {})
        path = out / RESULT_FILE
        if path.is_file():
            result = json.loads(path.read_text())
            result["cost"] = {
                "usd": self.ledger.total_usd,
                "by_kind": dict(sorted(self.by_kind.items())),
                "by_tier": dict(sorted(self.by_tier.items())),
                "revocations": self.revocations,
            }
            write_json_atomic(path, result)
