"""Two workers, one emulated ~3x slower: shoal's plan vs DDP's equal split vs the ideal.

    python bench/hetero_throughput.py [--steps 30]

The slow worker is a K80 and the fast one a V100 under Gavel's measured "Transformer (batch
size 32)" throughputs, a 3.03x ratio. The ideal is the sum of the two workers' speeds: the
V100's measured alone, the emulated K80's that divided by the ratio (an emulated kind's speed
is defined relative to the fastest kind in its run, so a K80 alone would run at host speed).
"""

from __future__ import annotations

import argparse
import json
import statistics

from _common import JOBS, as_options, ddp_step_times, machine, shoal_step_times, steady

from shoal.cluster import load_catalog

WORKLOAD = "Transformer (batch size 32)"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--job", choices=sorted(JOBS), default="conv")
    args = p.parse_args()
    options = {"micro_batch_size": 32, "global_batch_size": 256, "workload": WORKLOAD}
    batch = options["global_batch_size"]
    job, opts = str(JOBS[args.job]), as_options(options)
    cat = load_catalog()
    ratio = cat.relative_speed("v100", WORKLOAD) / cat.relative_speed("k80", WORKLOAD)

    def throughput(times: list[float]) -> float:
        return batch / steady(times, args.warmup)

    runs = {"v100_alone": [], "shoal_plan": [], "ddp_equal_split": []}
    for _ in range(args.repeats):  # interleaved, so drift on the host hits all alike
        runs["v100_alone"].append(throughput(shoal_step_times(job, ["v100"], args.steps, opts)))
        runs["shoal_plan"].append(
            throughput(shoal_step_times(job, ["v100", "k80"], args.steps, opts))
        )
        runs["ddp_equal_split"].append(
            throughput(ddp_step_times(job, 2, args.steps, dict(options), [1.0, ratio]))
        )
    med = {k: statistics.median(v) for k, v in runs.items()}
    ideal = med["v100_alone"] * (1 + 1 / ratio)
    print(
        json.dumps(
            {
                "job": args.job,
                "options": options,
                "slowdown": ratio,
                "machine": machine(),
                "repeats": args.repeats,
                "samples_per_s_median": med,
                "samples_per_s_runs": runs,
                "ideal_samples_per_s": ideal,
                "shoal_over_ddp": med["shoal_plan"] / med["ddp_equal_split"],
                "shoal_over_ideal": med["shoal_plan"] / ideal,
            }
        )
    )


if __name__ == "__main__":
    main()
