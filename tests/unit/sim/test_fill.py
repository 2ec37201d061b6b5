"""The water-fill's bundle pass crosses a stall in a non-concave speedup curve."""

import pytest

from shoal.sim.jobs import JobRun, JobSpec
from shoal.sim.policies.fill import waterfill


def _score(job, counts, kind, left):
    # a fifth GPU (the first on a second node) gains nothing; the sixth to eighth gain again
    n = counts.get(kind, 0)
    return 0.0 if n == 4 or n >= 8 else 1.0 / (n + 1)


@pytest.mark.parametrize("lookahead,gpus", [(1, 4), (2, 8), (4, 8)])
def test_bundles_cross_a_node_boundary_only_when_asked(lookahead, gpus):
    job = JobRun(JobSpec("j", 0.0, "cifar10", 1, 128, 100.0))
    plan = waterfill(
        [job], {"t4": 16}, lambda j, left: "t4", _score, lambda j: 64, lookahead=lookahead
    )
    assert plan == {"j": {"t4": gpus}}


def test_a_bundle_score_values_the_bundle_as_a_whole():
    # with a bundle score, the bundle pass asks it, not the mean of one-at-a-time scores
    job = JobRun(JobSpec("j", 0.0, "cifar10", 1, 128, 100.0))

    def plan_with(bundle):
        fill = waterfill(
            [job], {"t4": 16}, lambda j, left: "t4", _score, lambda j: 64, 4, bundle_score=bundle
        )
        return fill["j"]["t4"]

    assert plan_with(lambda job, counts, kind, d, left: 0.0) == 4  # no bundle pays
    assert plan_with(lambda job, counts, kind, d, left: float(counts[kind] < 12)) == 12


def test_bundles_past_one_node_fill_their_last_node():
    # with node sizes given, a bundle larger than a node ends on a node boundary
    job = JobRun(JobSpec("j", 0.0, "cifar10", 1, 128, 100.0))
    asked = []

    def bundle(job, counts, kind, d, left):
        asked.append((counts[kind], d))
        return 1.0 if counts[kind] + d == 11 or counts[kind] + d == 12 else 0.0

    plan = waterfill(
        [job], {"t4": 16}, lambda j, left: "t4", _score, lambda j: 64, 16, bundle, {"t4": 4}
    )
    # 11 GPUs end mid-node, so the job goes from 4 to 12 in one bundle
    assert plan == {"j": {"t4": 12}}
    assert all(d <= 4 or (n + d) % 4 == 0 for n, d in asked)
    assert (4, 8) in asked and (4, 7) not in asked
