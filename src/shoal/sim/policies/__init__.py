"""Scheduling policies, one module each, all behind `shoal.sim.policy.Policy`.

`make_policy(name)` is the only place that knows the names; the simulator core never does.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.errors import UserError
from shoal.sim.policies.easyscale import EasyScalePolicy
from shoal.sim.policies.fifo import FifoPolicy
from shoal.sim.policies.optimus import OptimusPolicy
from shoal.sim.policies.pollux import PolluxPolicy
from shoal.sim.policies.shoal import ShoalPolicy
from shoal.sim.policies.tiresias import TiresiasPolicy
from shoal.sim.policy import Policy

POLICIES: dict[str, Callable[[], Policy]] = {
    "yarn-cs": FifoPolicy,
    "tiresias": TiresiasPolicy,
    "easyscale-homo": lambda: EasyScalePolicy(heterogeneous=False),
    "easyscale-heter": lambda: EasyScalePolicy(heterogeneous=True),
    "optimus": OptimusPolicy,
    "pollux": PolluxPolicy,
    "shoal": ShoalPolicy,
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise UserError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
