"""Two workers, one emulated ~3x slower: shoal's plan vs DDP's equal split vs the ideal.

    python bench/hetero_throughput.py [--job conv|transformer] [--repeats 3]
        [--micro-batch-size 32] [--global-batch-size 256]

The slow worker is a K80 and the fast one a V100 under Gavel's measured "Transformer (batch
size 32)" throughputs, a 3.03x ratio. Each repeat runs, in fresh interpreters:

1. the V100 alone: its throughput, and its median time per micro-batch h;
2. shoal with its plan, the K80 emulated at 3.03 x h per micro-batch;
3. DDP's equal split, the K80 emulated the same way (the same absolute speed as in 2);
4. shoal held to the equal split (`--max-micro-batches M/2`): the plan's own gain, with the
   engine unchanged.

The ratios are the median of each repeat's own ratio (every repeat's is printed too).

Fixing the K80's speed from run 1 keeps it the same in every run: paced against each run's
own V100, it would be slower wherever the two processes contend more for the host's cores
(an equal split computes on both at once). The ideal is the sum of the two workers' speeds:
the V100 alone, plus the K80 at the V100's speed / 3.03.
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
    shoal_run_rows,
    steady,
    step_periods,
)

from shoal.perf.devices import load_devices

WORKLOAD = "Transformer (batch size 32)"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=30, help="steps per run")
    p.add_argument("--warmup", type=int, default=8, help="first steps left out of the median")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side")
    p.add_argument("--job", choices=sorted(JOBS), default="conv", help="the job to train")
    p.add_argument("--micro-batch-size", type=int, default=32, help="the micro-batch size b")
    p.add_argument("--global-batch-size", type=int, default=256, help="the global batch size B")
    args = p.parse_args()
    check_runs(p, args)
    check_batches(p, args.micro_batch_size, args.global_batch_size)
    options = {
        "micro_batch_size": args.micro_batch_size,
        "global_batch_size": args.global_batch_size,
        "workload": WORKLOAD,
    }
    batch = options["global_batch_size"]
    half = batch // options["micro_batch_size"] // 2
    job, opts = str(JOBS[args.job]), as_options(options)
    cat = load_devices()
    ratio = cat.workload_speed("v100", WORKLOAD) / cat.workload_speed("k80", WORKLOAD)

    def throughput(rows: list[dict]) -> float:
        return batch / steady(step_periods(rows), args.warmup)

    def per_worker_s(rows: list[dict]) -> list[float | None]:
        """Each worker's median seconds per micro-batch (None: the plan gave it none)."""
        out = []
        for w in range(len(rows[0]["workers"])):
            times = [r["workers"][w]["micro_batch_time_s"] for r in rows[args.warmup :]]
            times = [t for t in times if t is not None]
            out.append(statistics.median(times) if times else None)
        return out

    keys = ("v100_alone", "shoal_plan", "ddp_equal_split", "shoal_equal_split")
    runs = {k: [] for k in keys}
    detail = []
    for r in range(args.repeats):  # interleaved, so drift on the host hits all alike
        alone = shoal_run_rows(job, ["v100"], args.steps, opts)
        host_s = per_worker_s(alone)[0]
        runs["v100_alone"].append(throughput(alone))
        for side in rotation(list(keys[1:]), r):
            if side == "ddp_equal_split":
                ddp = ddp_step_times(job, 2, args.steps, dict(options), [1.0, ratio], host_s)
                runs[side].append(batch / steady(ddp, args.warmup))
                continue
            cap = half if side == "shoal_equal_split" else None
            rows = shoal_run_rows(job, ["v100", "k80"], args.steps, opts, host_s=host_s, cap=cap)
            runs[side].append(throughput(rows))
            if side == "shoal_plan":
                plan = rows
        detail.append(
            {
                "host_s_per_micro_batch": host_s,
                "plan": plan[-1]["workers"][0]["micro_batches"],
                "plan_s_per_micro_batch": per_worker_s(plan),
            }
        )
    ideal = [v * (1 + 1 / ratio) for v in runs["v100_alone"]]
    per_repeat_ratios = {
        "shoal_over_ddp": per_repeat(runs["shoal_plan"], runs["ddp_equal_split"]),
        "shoal_over_own_equal_split": per_repeat(runs["shoal_plan"], runs["shoal_equal_split"]),
        "shoal_over_ideal": per_repeat(runs["shoal_plan"], ideal),
    }
    print(
        json.dumps(
            {
                "job": args.job,
                "options": options,
                "slowdown": ratio,
                "machine": machine(),
                "repeats": args.repeats,
                "samples_per_s_median": {k: statistics.median(v) for k, v in runs.items()},
                "samples_per_s_runs": runs,
                "runs": detail,
                "ideal_samples_per_s": statistics.median(ideal),
                **{k: statistics.median(v) for k, v in per_repeat_ratios.items()},
                "per_repeat": per_repeat_ratios,
            }
        )
    )


if __name__ == "__main__":
    main()
