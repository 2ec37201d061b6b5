import heapq
import itertools
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shoal.errors import UserError
from shoal.plan import makespan, plan_micro_batches


def brute_force(m, times, caps):
    best = math.inf
    ranges = [range(0, min(m, c if c is not None else m) + 1) for c in caps]
    for counts in itertools.product(*ranges):
        if sum(counts) == m and all(t < math.inf or n == 0 for n, t in zip(counts, times)):
            best = min(best, makespan(counts, times))
    return best


times_st = st.lists(
    st.one_of(st.floats(0.1, 10.0), st.just(math.inf), st.sampled_from([1.0, 2.0, 3.0])),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(0, 9), times=times_st, data=st.data())
def test_plan_is_optimal_against_brute_force(m, times, data):
    caps = data.draw(
        st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=len(times), max_size=len(times))
    )
    expected = brute_force(m, times, caps)
    if expected == math.inf:
        with pytest.raises(UserError):
            plan_micro_batches(m, times, caps)
        return
    plan = plan_micro_batches(m, times, caps)
    assert plan.num_micro_batches == m
    assert all(c is None or n <= c for n, c in zip(plan.counts, caps))
    assert all(n == 0 for n, t in zip(plan.counts, times) if t == math.inf)
    assert makespan(plan.counts, times) == pytest.approx(expected)


def test_fewer_micro_batches_than_workers_and_deterministic_ties():
    plan = plan_micro_batches(2, [1.0, 1.0, 1.0, 1.0])
    assert plan.counts == (1, 1, 0, 0)  # ties go to the lower rank
    assert plan_micro_batches(2, [1.0] * 4) == plan


def test_heterogeneous_split_and_indices():
    plan = plan_micro_batches(8, [1.0, 3.0])
    assert plan.counts == (6, 2)
    assert list(plan.indices(0)) == list(range(6)) and list(plan.indices(1)) == [6, 7]
    # the owner of every micro-batch is the rank whose range holds it, boundaries included
    plan = plan_micro_batches(9, [1.0, math.inf, 2.0, 1.0])
    assert plan.counts == (4, 0, 2, 3)
    assert [plan.owner(j) for j in range(9)] == [0, 0, 0, 0, 2, 2, 3, 3, 3]
    assert all(plan.owner(j) == r for r in range(4) for j in plan.indices(r))
    with pytest.raises(IndexError):
        plan.owner(9)


def test_makespan_is_the_busiest_worker_and_an_empty_plan_takes_no_time():
    assert makespan([2, 0, 1], [1.0, math.inf, 3.0]) == 3.0  # an idle worker costs nothing
    assert makespan([0, 0], [1.0, 2.0]) == 0.0
    with pytest.raises(ValueError):  # one count per worker, not silently truncated
        makespan([1, 1], [1.0])


def test_worker_that_can_take_nothing():
    assert plan_micro_batches(3, [math.inf, 2.0]).counts == (0, 3)
    assert plan_micro_batches(3, [1.0, 1.0], caps=[0, None]).counts == (0, 3)
    with pytest.raises(UserError):
        plan_micro_batches(3, [1.0, 1.0], caps=[1, 1])
    with pytest.raises(ValueError):
        plan_micro_batches(3, [0.0, 1.0])


def one_at_a_time(m, times, caps):
    """The greedy as it was, one heap step per micro-batch (the reference of the fast path)."""
    limit = [math.inf if c is None else c for c in caps]
    counts = [0] * len(times)
    heap = [(t, r) for r, t in enumerate(times) if math.isfinite(t) and limit[r] > 0]
    heapq.heapify(heap)
    for _ in range(m):
        _, r = heapq.heappop(heap)
        counts[r] += 1
        if counts[r] < limit[r]:
            heapq.heappush(heap, ((counts[r] + 1) * times[r], r))
    return tuple(counts)


big_times_st = st.lists(
    st.one_of(
        st.floats(0.01, 10.0), st.just(math.inf), st.sampled_from([0.1, 0.2, 0.3, 1.0, 1 / 3])
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(m=st.integers(0, 20000), times=big_times_st, data=st.data())
def test_many_micro_batches_plan_as_the_one_at_a_time_greedy(m, times, data):
    """A batch of 10^18 samples (--batch-bounds, a scenario's batch) hung: one heap step per
    micro-batch. Past BULK_PER_WORKER per worker the greedy starts from a threshold: the
    same plan, ties included."""
    caps = data.draw(
        st.lists(
            st.one_of(st.none(), st.integers(0, 6000)), min_size=len(times), max_size=len(times)
        )
    )
    if sum(c if c is not None else math.inf for c, t in zip(caps, times) if t < math.inf) < m:
        return
    assert plan_micro_batches(m, times, caps).counts == one_at_a_time(m, times, caps)


def test_a_huge_batch_takes_a_few_heap_steps(monkeypatch):
    pops = []
    real = heapq.heappop
    monkeypatch.setattr(heapq, "heappop", lambda heap: pops.append(1) or real(heap))
    plan = plan_micro_batches(10**5, [1.0, 2.0, 3.0, 1.5])
    assert plan.counts == (40000, 20000, 13333, 26667) and len(pops) <= 16
    assert sum(plan_micro_batches(10**18, [1.0, 2.0, 3.0, 1.5]).counts) == 10**18
    # also when the fastest worker is capped, and when every worker is slow or very fast
    for times, caps in [([1.0, 1000.0], [10, None]), ([50.0, 70.0], None), ([1e-6, 3e-6], None)]:
        pops.clear()
        plan = plan_micro_batches(10**5, times, caps)
        assert len(pops) <= 16, (times, caps)
        assert plan.counts == one_at_a_time(10**5, times, caps or [None] * 2)


def is_the_greedys(counts, m, times, caps):
    """Whether `counts` holds the m smallest values (n * t_r, r, n), n >= 1, in the greedy's
    order (value, then rank; past 2^53 a worker's consecutive products can be equal floats),
    capped: every value handed out comes before every value withheld."""
    limit = [math.inf if c is None else c for c in caps]
    pairs = list(enumerate(zip(counts, times, strict=True)))
    given = [(n * t, r, n) for r, (n, t) in pairs if n]
    withheld = [((n + 1) * t, r, n + 1) for r, (n, t) in pairs if t < math.inf and n < limit[r]]
    return (
        sum(counts) == m
        and all(n <= cap for n, cap in zip(counts, limit, strict=True))
        and max(given, default=(0.0, -1, 0)) < min(withheld, default=(math.inf, 0, 0))
    )


@settings(max_examples=300, deadline=None)
@given(
    m=st.one_of(st.integers(0, 10**6), st.integers(10**14, 10**18)),
    workers=st.lists(
        st.tuples(
            st.one_of(st.floats(1e-6, 1e3), st.just(math.inf), st.sampled_from([0.1, 1 / 3, 7.0])),
            st.one_of(st.none(), st.integers(0, 10**17)),
        ),
        min_size=1,
        max_size=6,
    ),
)
# where a count from float division is off and only the products put it right
@example(m=20_119_787_762_099_020, workers=[(5.5, None), (6.0, None), (29.0, None)])
@example(
    m=5_070_231_635_261_365,
    workers=[(7.0, None), (1.5, None), (151.16135711149727, None), (274.66188758032945, None)],
)
def test_any_batch_however_large_is_the_greedys_plan(m, workers):
    """The module's claim at every size, beyond what the one-at-a-time greedy can check: the
    plan holds the m smallest values of {n * t_i} in (value, rank) order, on float products,
    through micro-batch times of nine orders of magnitude (10^18 samples: past 2^53)."""
    times, caps = [t for t, _ in workers], [c for _, c in workers]
    if sum(c if c is not None else math.inf for c, t in zip(caps, times) if t < math.inf) < m:
        return
    counts = plan_micro_batches(m, times, caps).counts
    assert is_the_greedys(counts, m, times, caps)
