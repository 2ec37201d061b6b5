"""The report's summary block: the run's outcome and its membership changes in a few numbers.

Outcome figures (final step, state digest, wall time, samples/s) come from `result.json`. When a
run wrote none (it crashed or is still running) they fall back to what `metrics.jsonl` shows and
`from_result` is False, so the page can say so. Recovery figures come from `recover` events:
lost steps are summed, recovery times reported as a median (robust to one slow restart).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from shoal.report.load import Run


@dataclass(frozen=True)
class Summary:
    final_step: int | None
    state_sha256: str | None
    wall_time_s: float | None
    samples_per_s: float | None
    consistency: str | None
    devices: tuple[str, ...]
    from_result: bool
    num_steps_logged: int
    joins: int
    leaves: int
    failures: int
    recoveries: int
    lost_steps: int
    median_recovery_time_s: float | None
    cost_usd: float | None = None  # servers bought from a provider: the ledger's total
    revocations: int | None = None


def _count(run: Run, kind: str) -> int:
    return sum(1 for e in run.events if e.event == kind)


def _cost(run: Run) -> dict:
    """The ledger's total and revocations: result.json's cost block, else the lease lines."""
    if run.result is not None and run.result.cost:
        return {
            "cost_usd": run.result.cost["usd"],
            "revocations": run.result.cost.get("revocations"),
        }
    closes = [x for x in run.leases if x.action == "close"]
    if not closes:
        return {}
    return {
        "cost_usd": sum(x.usd or 0.0 for x in closes),
        "revocations": sum(x.cause == "revoked" for x in closes),
    }


def summarize(run: Run) -> Summary:
    """Compute the summary block of a run."""
    recovers = [e for e in run.events if e.event == "recover"]
    times = [e.recovery_time_s for e in recovers if e.recovery_time_s is not None]
    common = dict(
        num_steps_logged=len(run.steps),
        joins=_count(run, "join"),
        leaves=_count(run, "leave"),
        failures=_count(run, "fail"),
        recoveries=len(recovers),
        lost_steps=sum(e.lost_steps or 0 for e in recovers),
        median_recovery_time_s=statistics.median(times) if times else None,
        **_cost(run),
    )
    r = run.result
    if r is not None:
        return Summary(
            final_step=r.final_step,
            state_sha256=r.state_sha256,
            wall_time_s=r.wall_time_s,
            samples_per_s=r.samples_per_s,
            consistency=r.consistency,
            devices=r.workers,
            from_result=True,
            **common,
        )
    last = run.steps[-1] if run.steps else None
    samples = [s.global_batch_size for s in run.steps if s.global_batch_size is not None]
    wall = last.wall_time_s if last else None
    devices = sorted({w.device for s in run.steps for w in s.workers if w.device})
    return Summary(
        final_step=last.step + 1 if last else None,  # steps done, as result.json counts
        state_sha256=None,
        wall_time_s=wall,
        samples_per_s=sum(samples) / wall if wall and samples else None,
        consistency=None,
        devices=tuple(devices),
        from_result=False,
        **common,
    )
