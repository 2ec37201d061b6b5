"""Step time of shoal exact vs shoal fast vs torch DDP, 2 equal workers, same job and data.

    python bench/step_time.py [--steps 40] [--repeats 3]

Prints one JSON object per job with median steady-state step times and the ratios to DDP.
"""

from __future__ import annotations

import argparse
import json

from _common import JOBS, as_options, ddp_step_times, machine, shoal_step_times, steady

CONFIGS = {
    "conv": {"micro_batch_size": 32, "global_batch_size": 256},
    "transformer": {"micro_batch_size": 16, "global_batch_size": 64},
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for name, options in CONFIGS.items():
        job = str(JOBS[name])
        best = {"exact": [], "fast": [], "ddp": []}
        for _ in range(args.repeats):  # interleaved, so drift hits all three alike
            for mode in ("exact", "fast"):
                times = shoal_step_times(
                    job, ["v100", "v100"], args.steps, as_options(options), mode
                )
                best[mode].append(steady(times, args.warmup))
            best["ddp"].append(steady(ddp_step_times(job, 2, args.steps, options), args.warmup))
        med = {k: sorted(v)[len(v) // 2] for k, v in best.items()}
        print(
            json.dumps(
                {
                    "job": name,
                    "options": options,
                    "workers": 2,
                    "machine": machine(),
                    "step_time_s": med,
                    "exact_over_ddp": med["exact"] / med["ddp"],
                    "fast_over_ddp": med["fast"] / med["ddp"],
                }
            )
        )


if __name__ == "__main__":
    main()
