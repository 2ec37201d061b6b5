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
    as_options,
    check_batches,
    check_runs,
    ddp_step_times,
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
    p.add_argument("--steps", type=int, default=40, help="steps per run")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side")
    p.add_argument("--job", choices=sorted(CONFIGS), help="one job (None: both)")
    p.add_argument("--micro-batch-size", type=int, help="b (None: the job's own)")
    p.add_argument("--global-batch-size", type=int, help="B (None: the job's own)")
    args = p.parse_args()
    check_runs(p, args)
    jobs = {}
    for name, defaults in CONFIGS.items():
        if args.job not in (None, name):
            continue
        options = dict(defaults)
        if args.micro_batch_size is not None:
            options["micro_batch_size"] = args.micro_batch_size
        if args.global_batch_size is not None:
            options["global_batch_size"] = args.global_batch_size
        check_batches(p, options["micro_batch_size"], options["global_batch_size"])
        jobs[name] = options
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
