"""YARN-CS: first-in first-out gang scheduling with head-of-line blocking.

Each job runs on exactly its requested number of GPUs, all of one kind (its preferred kind, else
the fastest kind for its application that has room), at its own batch size. Jobs start in arrival
order; when the job at the head of the queue does not fit, nothing behind it starts. No job is
ever preempted or resized.
"""

from __future__ import annotations

from shoal.sim.policies.common import place_gang
from shoal.sim.policy import ClusterView, Decision


class FifoPolicy:
    name = "yarn-cs"
    periodic = False
    inplace_rescale = False
    gangs_only = True

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        decisions: dict[str, Decision] = {}
        for job in view.pending:
            decision = place_gang(view, job)
            if decision is None:
                break  # head-of-line blocking: FIFO never lets a later job overtake
            decisions[job.name] = decision
        return decisions
