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

from _common import JOBS, as_options, ddp_step_times, machine, shoal_step_times, steady

from shoal.cluster import load_catalog

WORKLOAD = "Transformer (batch size 32)"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--job", choices=sorted(JOBS), default="conv")
    args = p.parse_args()
    options = {"micro_batch_size": 32, "global_batch_size": 256, "workload": WORKLOAD}
    batch = options["global_batch_size"]
    job, opts = str(JOBS[args.job]), as_options(options)
    cat = load_catalog()
    ratio = cat.relative_speed("v100", WORKLOAD) / cat.relative_speed("k80", WORKLOAD)

    def throughput(times: list[float]) -> float:
        return batch / steady(times, args.warmup)

    fast_alone = throughput(shoal_step_times(job, ["v100"], args.steps, opts))
    slow_alone = fast_alone / ratio
    shoal_mixed = throughput(shoal_step_times(job, ["v100", "k80"], args.steps, opts))
    ddp_split = throughput(ddp_step_times(job, 2, args.steps, {**options}, [1.0, ratio]))
    print(
        json.dumps(
            {
                "job": args.job,
                "options": options,
                "slowdown": ratio,
                "machine": machine(),
                "samples_per_s": {
                    "v100_alone": fast_alone,
                    "k80_alone": slow_alone,
                    "shoal_plan": shoal_mixed,
                    "ddp_equal_split": ddp_split,
                },
                "shoal_over_ddp": shoal_mixed / ddp_split,
                "shoal_over_ideal": shoal_mixed / (fast_alone + slow_alone),
            }
        )
    )


if __name__ == "__main__":
    main()
