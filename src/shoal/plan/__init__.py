"""Pure planning: who computes which micro-batch, and what each micro-batch reads (no torch)."""

from shoal.plan.assign import Plan, makespan, plan_micro_batches
from shoal.plan.order import DataOrder, data_seed, micro_batch_seed

__all__ = [
    "DataOrder",
    "Plan",
    "data_seed",
    "makespan",
    "micro_batch_seed",
    "plan_micro_batches",
]
