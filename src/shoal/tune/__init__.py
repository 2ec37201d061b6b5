"""Autotuning of schedule knobs (micro-batch size, checkpointed fraction, fusion) under a cap
on peak memory.

`trial` measures one configuration in a fresh process, `runner` launches and classifies such a
process, and `search` drives Optuna over the knob space. `shoal tune` (`shoal.cli.tune`) is the
command-line front end.
"""

from shoal.tune.runner import TrialOutcome, run_trial
from shoal.tune.search import SearchSpace, TrialRecord, TuneResult, tune
from shoal.tune.trial import TrialSpec

__all__ = [
    "SearchSpace",
    "TrialOutcome",
    "TrialRecord",
    "TrialSpec",
    "TuneResult",
    "run_trial",
    "tune",
]
