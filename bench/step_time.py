"""Step time of shoal exact vs shoal fast vs torch DDP, 2 equal workers, same job and data.

    python bench/step_time.py [--steps 40] [--repeats 3] [--job conv|transformer]
        [--micro-batch-size b --global-batch-size B]

Prints one JSON object per job: median steady-state step times, and the ratios to DDP as the
median of each repeat's own ratio (with every repeat's, to show the spread).
"""

from __future__ import annotations

import argparse
import json
import statistics

from _common import (
    JOBS,
    add_step_flags,
    as_options,
    check_runs,
    ddp_step_times,
    job_options,
    machine,
    per_repeat,
    rotation,
    shoal_step_times,
    steady,
)

CONFIGS = {
    "conv": {"micro_batch_size": 32, "global_batch_size": 256},
    "transformer": {"micro_batch_size": 16, "global_batch_size": 64},
}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_step_flags(p, CONFIGS, repeats=3)
    args = p.parse_args()
    check_runs(p, args)
    jobs = job_options(p, args, CONFIGS, world=2)
    for name, options in jobs.items():
        job = str(JOBS[name])
        runs = {"exact": [], "fast": [], "ddp": []}
        for r in range(args.repeats):  # interleaved, so drift on the host hits all alike
            for side in rotation(list(runs), r):
                if side == "ddp":
                    times = ddp_step_times(job, 2, args.steps, options)
                else:
                    times = shoal_step_times(
                        job, ["v100", "v100"], args.steps, as_options(options), side
                    )
                runs[side].append(steady(times, args.warmup))
        ratios = {
            f"{mode}_over_ddp": per_repeat(runs[mode], runs["ddp"]) for mode in ("exact", "fast")
        }
        print(
            json.dumps(
                {
                    "job": name,
                    "options": options,
                    "workers": 2,
                    "machine": machine(),
                    "repeats": args.repeats,
                    "step_time_s": {k: statistics.median(v) for k, v in runs.items()},
                    **{k: statistics.median(v) for k, v in ratios.items()},
                    "per_repeat": ratios,
                }
            )
        )


if __name__ == "__main__":
    main()
