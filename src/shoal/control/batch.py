"""The goodput-best batch size of a job on a placement (Pollux's choice, shared by both drivers).

The statistical-efficiency model and the step time live in `shoal.perf.goodput`; this decides:
for a placement (GPUs per kind, the GPUs per node of each kind) and the job's progress, the batch
size that maximises goodput, and the goodput it gives. The decision goes through the same
`pollux` BatchPolicy object call a live run makes (`control.batch_policy`): the application's
measured gradient statistics at `progress` become the StepStats a step would measure
(`gradstats.synthetic_stats`), and the placement's profiled step time is the BatchContext's
throughput model. The goodput returned is the simulation's truth (`GoodputModel.progress_rate`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from shoal.control.batch_policy import make_policy
from shoal.control.batch_policy_base import BatchContext, BatchPolicy
from shoal.control.gradstats import StepStats, synthetic_stats
from shoal.perf.goodput import Counts, GoodputModel, goodput_model

PROFILE_UNIT = (("t4", 1),)  # one GPU of the profiled kind: the unit of speedup


def placement_key(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, n) for k, n in counts.items() if n))


def nodes_needed(counts: Mapping[str, int], per_node: Mapping[str, int]) -> int:
    """Nodes a consolidated placement of `counts` spans."""
    return sum(-(-n // per_node[k]) for k, n in counts.items() if n)


SIM_CANDIDATES = 12  # the simulator's geometric grid of batch sizes per decision
SETTLE_ROUNDS = 4  # decisions replayed per choice (the choice settles in 2-3)

_DECISIONS: dict = {}  # (app, placement, nodes, curve bucket) -> batch: profiles are immutable


def sim_policy() -> BatchPolicy:
    """The pollux policy as the simulator runs it: batches in whole samples, a decision at
    every call (the simulator re-decides at each of its own intervals), no hysteresis."""
    return make_policy(
        "pollux",
        micro_batch_size=1,
        bounds=None,
        every=1,
        candidates=SIM_CANDIDATES,
        smoothing=0.0,  # the profile's curve is already smooth: decide from the step at hand
    )


def sim_inputs(
    model: GoodputModel, key: Counts, num_nodes: int, progress: float, batch: float | None = None
) -> tuple[StepStats, BatchContext]:
    """What the simulator hands the policy: the profile's statistics at `progress` as a step's
    StepStats, and a BatchContext whose throughput is the placement's profiled step time."""
    profile = model.profile
    m0 = profile.init_batch_size
    k_eff = model.effective_gpus(key)
    # no larger than the memory bound allows without accumulation
    high = int(max(m0, min(profile.max_batch_size, profile.max_local_bsz * k_eff)))
    # what a step at `batch` measures (the curve trained at that batch); Pollux's variance is
    # per M0 batch, the StepStats' per sample
    grad_sqr, grad_var = profile.grad_stats(progress, batch)
    stats = synthetic_stats(0, 1, 2, grad_sqr, grad_var * m0)
    context = BatchContext(
        micro_batch_size=1,
        bounds=(m0, high),
        cap_micro_batches=None,
        throughput=lambda batch: batch / model.step_time_s(key, num_nodes, batch),
        initial_batch=m0,
    )
    return stats, context


def _settle(model: GoodputModel, key: Counts, num_nodes: int, progress: float) -> float:
    """A live pollux run decides from the statistics of the batch it trains at, then trains at
    its choice and decides again: replay that loop on the profile (from B0) until the choice
    repeats (a few rounds; SETTLE_ROUNDS at most)."""
    policy, batch = sim_policy(), None
    for _ in range(SETTLE_ROUNDS):
        stats, context = sim_inputs(model, key, num_nodes, progress, batch)
        choice = float(policy.decide(stats, context))
        if choice == batch:
            break
        batch = choice
    return batch


def best_batch(app: str, counts: Mapping[str, int], num_nodes: int, progress: float):
    """(batch size, goodput) maximising goodput of `app` on this placement at `progress`.

    The choice is memoised per measured point of the gradient-statistics curve (one per epoch
    of the validation run), decided at the point that opens the bucket, so it does not depend
    on which caller asked first."""
    key = placement_key(counts)
    if not key:
        return None, 0.0
    model = goodput_model(app)
    points = model.profile.grad_progress
    epoch = bisect.bisect_left(points, progress)
    memo = (app, key, num_nodes, epoch)
    batch = _DECISIONS.get(memo)
    if batch is None:
        anchor = points[epoch - 1] if epoch > 0 else 0.0
        batch = _DECISIONS[memo] = _settle(model, key, num_nodes, anchor)
    return batch, model.progress_rate(key, num_nodes, batch, progress)


def unit_goodput(app: str, progress: float) -> float:
    """Goodput of one profiled-kind GPU: the unit a speedup is measured in."""
    return best_batch(app, dict(PROFILE_UNIT), 1, progress)[1]
