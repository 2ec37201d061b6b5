"""Assigning a step's M micro-batches to workers so the step finishes as early as possible.

Worker i takes t_i seconds per micro-batch, so n_i micro-batches keep it busy n_i * t_i seconds
and the step's makespan is max_i n_i * t_i. Minimising that over integers n_i >= 0 with
sum n_i = M (and n_i <= cap_i) is scheduling identical jobs on uniformly related machines, for
which handing out micro-batches one at a time, each to the worker that would finish it
earliest, is optimal: after k assignments the greedy holds the k smallest values of the
multiset {m * t_i : m >= 1} (capped), and the optimal makespan for k is the k-th smallest of
them. Ties go to the lower rank, so every worker computes the same plan from the same inputs.

Micro-batches are handed out as contiguous index ranges in rank order; which worker computes
which micro-batch never changes the result (that is the runtime's invariant), only the time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.errors import UserError

# Above this many micro-batches per usable worker the greedy starts from a threshold found by
# bisection (each probe costs a pass over the workers) instead of one heap step per batch.
BULK_PER_WORKER = 256
BISECTIONS = 200  # more than enough to reach adjacent floats


@dataclass(frozen=True)
class Plan:
    """counts[r] micro-batches for worker r, covering indices 0..M-1 in rank order."""

    counts: tuple[int, ...]

    @property
    def num_micro_batches(self) -> int:
        return sum(self.counts)

    def indices(self, rank: int) -> range:
        start = sum(self.counts[:rank])
        return range(start, start + self.counts[rank])

    def owner(self, micro_batch: int) -> int:
        end = 0
        for rank, count in enumerate(self.counts):
            end += count
            if micro_batch < end:
                return rank
        raise IndexError(micro_batch)


class NotEnoughCapacity(UserError):
    """The workers' caps (--max-micro-batches) cannot hold the step's micro-batches: bad
    input at launch, or a group left too small after a loss (the runtime keeps its state)."""


def makespan(counts: Sequence[int], times_s: Sequence[float]) -> float:
    return max((n * t for n, t in zip(counts, times_s, strict=True) if n), default=0.0)


def plan_micro_batches(
    num_micro_batches: int,
    times_s: Sequence[float],
    caps: Sequence[int | None] | None = None,
) -> Plan:
    """An optimal min-makespan assignment of `num_micro_batches` to workers.

    `times_s[i]` is worker i's time per micro-batch (math.inf: it can take nothing);
    `caps[i]` optionally bounds its micro-batches per step.
    """
    caps = list(caps) if caps is not None else [None] * len(times_s)
    if len(caps) != len(times_s):
        raise ValueError("caps and times_s must have one entry per worker")
    if num_micro_batches < 0:
        raise ValueError("the number of micro-batches must be >= 0")
    for t in times_s:
        if not (t > 0):  # also rejects NaN
            raise ValueError(f"a micro-batch time must be positive, got {t}")
    limit = [math.inf if c is None else c for c in caps]
    if sum(limit[i] for i, t in enumerate(times_s) if math.isfinite(t)) < num_micro_batches:
        raise NotEnoughCapacity(
            f"the workers cannot take {num_micro_batches} micro-batches per step "
            "(too few usable workers or caps too low)"
        )
    usable = [r for r, t in enumerate(times_s) if math.isfinite(t) and limit[r] > 0]
    counts = [0] * len(times_s)
    if num_micro_batches > BULK_PER_WORKER * len(usable):  # a batch of 10^18 samples hung
        counts = _below_threshold(num_micro_batches, times_s, limit, usable)
    # heap of (finish time if given one more micro-batch, rank)
    heap = [((counts[r] + 1) * times_s[r], r) for r in usable if counts[r] < limit[r]]
    heapq.heapify(heap)
    for _ in range(num_micro_batches - sum(counts)):
        _, r = heapq.heappop(heap)
        counts[r] += 1
        if counts[r] < limit[r]:
            heapq.heappush(heap, ((counts[r] + 1) * times_s[r], r))
    return Plan(tuple(counts))


def _count_below(t: float, limit: float, threshold: float) -> int:
    """How many of the greedy's values 1 * t, 2 * t, ... (its float products) are below
    `threshold`, at most `limit`."""
    k = int(min(threshold // t, limit))  # near the answer (the caller keeps it finite) ...
    while k > 0 and k * t >= threshold:
        k -= 1
    while k < limit and (k + 1) * t < threshold:  # ... and the products decide
        k += 1
    return k


def _below_threshold(
    num: int, times_s: Sequence[float], limit: Sequence[float], usable: Sequence[int]
) -> list[int]:
    """The greedy's counts after it has handed out every value below a threshold T, the
    largest (by bisection) with at most `num` of them: those values come first in its order
    (value, rank), so continuing the greedy from here ends where it would have, after a few
    more steps (the values equal to T) instead of `num`."""
    counts = [0] * len(times_s)

    def below(threshold: float) -> list[int]:
        out = list(counts)
        for r in usable:  # past num + 1 a count only says "too many"
            out[r] = _count_below(times_s[r], min(limit[r], num + 1), threshold)
        return out

    # every uncapped worker has more than num values below hi
    lo, hi = 0.0, 2.0 * (num + 1) * max(times_s[r] for r in usable)
    if sum(below(hi)) <= num:
        return below(hi)
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        if sum(below(mid)) <= num:
            lo = mid
        else:
            hi = mid
    return below(lo)
