"""The simulator's prediction of bench/spot_savings.py, on its prior profile: no live run.

    python bench/spot_prior.py [the flags of spot_savings.py: --seeds, --startup, ...]

For each seed, the three sides spot_savings.py runs live, replayed by `shoal.sim.replay`
on the scenario the live runs are decided on (`prior_scenario`): the scaler from its own first
mix, the cheapest all-on-demand mix held, and SkyPilot-style restart on the cheapest mix,
checkpointing every --checkpoint-every steps at that mix's predicted step time. The initial
servers are ready at the start, as a live run's --workers are. Prints one JSON line per seed
and side, then the savings the simulator predicts (1 - mean scaler cost / mean on-demand
cost). Seconds: a few per seed. --sides, --out and --no-fixed change nothing here: every
side is replayed and nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys

import spot_savings as bench

from shoal.sim.replay import simulate
from shoal.sim.scenario import step_time_model


def predicted(args, seed: int) -> dict[str, object]:
    """The replays of one seed's three sides: {side: ScenarioResult}."""
    ready = {"initial_ready": True}
    sc = bench.prior_scenario(args, seed)
    no_spot = bench.prior_scenario(args, seed, quota={f"{k}:spot": 0 for k in bench.KINDS})
    on_demand = dataclasses.replace(
        no_spot, autoscale=False, initial=bench.cheapest_first_mix(no_spot), **ready
    )
    held = bench.cheapest_first_mix(sc)
    gpus = {key.split(":")[0]: n for key, n in held.items()}
    every_s = args.checkpoint_every * step_time_model(sc)(gpus, 128)
    restart = dataclasses.replace(
        sc, autoscale=False, initial=held, restart_from_checkpoint=True,
        checkpoint_every_s=every_s, **ready,
    )  # fmt: skip
    scaler = dataclasses.replace(sc, initial=bench.first_mix(sc), **ready)
    return {
        "scaler": simulate(scaler),
        "on-demand": simulate(on_demand),
        "restart": simulate(restart),
    }


def main(argv: list[str] | None = None) -> int:
    args = bench.parse_args(argv, __doc__)
    by_side: dict[str, list] = {side: [] for side in bench.SIDES}
    for seed in args.seed_list:
        for side, result in predicted(args, seed).items():
            by_side[side].append(result)
            row = {"seed": seed, "side": side, "time_h": round(result.time_s / 3600, 3)}
            row |= {"usd": round(result.cost_usd, 4), "revocations": result.revocations}
            print(json.dumps(row), flush=True)
    mean = {side: statistics.mean(r.cost_usd for r in rs) for side, rs in by_side.items()}
    hours = [r.time_s / 3600 for r in by_side["scaler"]]
    summary = {
        "saved": round(1 - mean["scaler"] / mean["on-demand"], 4),
        "usd": {side: round(usd, 2) for side, usd in mean.items()},
        "scaler_h": [round(min(hours), 2), round(max(hours), 2)],
        "revocations": {side: sum(r.revocations for r in rs) for side, rs in by_side.items()},
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
