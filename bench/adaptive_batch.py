"""Time to accuracy with an adaptive global batch: fixed batches (a sweep) vs jabas, pollux, shoal.

    python bench/adaptive_batch.py [--tasks digits,shakespeare] [--seeds 0,1,2]
        [--workers v100,k80,k80] [--eval-every 10] [--max-steps 600] [--exchange pollux|none]
        [--json FILE]
    python bench/adaptive_batch.py --smoke   # digits, 2 x 2 steps per side, 1 seed: plumbing only

Tasks (their job file: bench/_adaptive_tasks.py; `--toy`, the model study: _adaptive_toy.py):
- `digits`: examples/digits.py's CNN (SGD, momentum 0.9) on scikit-learn's digits; 300 images
  held out (a fixed permutation); target: validation accuracy >= --target-digits (0.975).
- `shakespeare`: examples/shakespeare.py's character-level causal transformer (AdamW, 10-step
  warm-up) on the shipped corpus's first 90 %; target: validation loss on 512 windows of the
  last 10 % <= --target-shakespeare (2.3).
- `reverse`: examples/transformer.py's transformer (AdamW, 10-step warm-up) learning to reverse
  sequences; 1,024 held-out sequences of another seed; target: validation loss <=
  --target-reverse (0.3).

Sides, each `shoal run` on the emulated mixed cluster `--workers`, >= 3 seeds:
- `fixed-B` for every B of the sweep (32-512, multiples of the micro-batch size); its first is
  `fixed-small`, its last `fixed-large`; `best-fixed` is the sweep's side with the lowest mean
  wall time to the target (among those reaching it on every seed);
- `jabas`, `pollux`, `shoal`: `--batch-policy NAME --batch-bounds SMALL:LARGE --batch-every P
  --lr-scaling sqrt`, starting at the small batch (`global_batch_size` = the sweep's first).
Every side scales the learning rate by sqrt(B / B_small) (the fixed sides through the job's `lr`
option, the adaptive ones through `--lr-scaling sqrt`), so the sides differ only in the batch.

The emulated cluster (--exchange pollux, the default): one worker per server, and a step's
gradient exchange costs what Pollux measured for an application of the task's family on three
single-GPU nodes (its trace's placement "111"; cifar10 for digits, bert for the transformers),
as a ratio to the compute of the initial step: sync / compute = 1.18 (cifar10) and 1.78 (bert).
A short calibration run fixes 1.25x the host's time per micro-batch as every run's yardstick
(SHOAL_EMULATED_HOST_S, which paces every kind, the fastest too) and sets
SHOAL_EMULATED_SYNC_S to the ratio x the initial step's compute; the throughput model of the
policies that weigh throughput (pollux, shoal) is told the same (`--batch-sync`; jabas has none).
`--exchange none`: loopback's exchange only (milliseconds), where a step's time is nearly linear
in its batch, and a larger batch buys almost no throughput.

Validation: each run is one `shoal run` to --max-steps that keeps a durable checkpoint every
--eval-every steps (`--checkpoint-every`, `--checkpoint-keep 0`); this process evaluates each on
the held-out set as it appears (one thread, between the run's steps) and stops the run once one
meets the target. Reported per run: steps, samples, wall time (the sum of the
steps' own `step_time_s`: restarts and evaluations excluded) and emulated GPU-seconds (step time
x workers in the step) to the first evaluation that meets the target, and the final metric;
per side, mean and spread (min..max) over seeds. Prints one JSON object, then a table.

Do not read wall times from a loaded
host: run it alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import _adaptive_tasks
import _args
import numpy as np
import torch
from _adaptive_tasks import ROOT, TASKS, evaluate
from _adaptive_toy import fmt_spread, toy_study, toy_table

ADAPTIVE = ("jabas", "pollux", "shoal")


def _checkpoints(out: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    """The run's complete checkpoints (a manifest is written after its .pt), oldest first."""
    found = [(int(m.stem[5:]), m.with_suffix(".pt")) for m in out.glob("checkpoints/ckpt-*.json")]
    return sorted(found)


def side_flags(side: str, task: str, args, calibrating=False) -> tuple[dict, list[str]]:
    """(job options, extra `shoal run` flags) of a side."""
    spec = TASKS[task]
    small, large = spec["sweep"][0], spec["sweep"][-1]
    options = {"task": task, "micro_batch_size": spec["b"], "lr": spec["lr"]}
    if side.startswith("fixed-"):
        batch = int(side.split("-")[1])
        options.update(global_batch_size=batch, lr=spec["lr"] * math.sqrt(batch / small))
        return options, []
    assert not calibrating
    options["global_batch_size"] = small
    flags = ["--batch-policy", side, "--batch-bounds", f"{small}:{large}"]
    flags += ["--batch-every", str(args.batch_every), "--lr-scaling", "sqrt"]
    # the policy's model knows the exchange (jabas has no model: shoal run warns that the flag
    # would change nothing)
    if side in ("pollux", "shoal") and args.exchange[task]["sync_micro_batches"]:
        flags += ["--batch-sync", f"{args.exchange[task]['sync_micro_batches']:.4f}"]
    return options, flags


# The emulated cluster's gradient exchange (--exchange pollux): the Pollux application of the
# same family, measured on three single-GPU nodes (placement "111": one worker per server, as
# v100,k80,k80 are) at its initial batch; its exchange / compute ratio is carried over to the
# task's initial step.
EXCHANGE_APP = {"digits": "cifar10", "shakespeare": "bert", "reverse": "bert"}
YARDSTICK_MARGIN = 1.25


def exchange_ratio(app: str) -> float:
    """Pollux's measured sync time / compute time of one step on 3 nodes x 1 GPU, at the app's
    initial global batch (interpolated in log local batch, as `perf.profiles` does)."""
    from shoal.perf.profiles import load_profile

    profile = load_profile(app)
    curve, local = profile.curves[(3, 3)], math.log(profile.init_batch_size / 3)
    xs = [math.log(x) for x in curve.local_bsz]
    step = float(np.interp(local, xs, curve.step_time_s))
    sync = float(np.interp(local, xs, curve.sync_time_s))
    return sync / (step - sync)


def calibrate(task: str, args) -> dict:
    """The emulated exchange of `task` on --workers: the host's time per micro-batch (median of
    the fastest worker's over a short run at the initial batch) is fixed as every run's
    yardstick (SHOAL_EMULATED_HOST_S), and the exchange is the ratio x the initial step's
    compute (its makespan in the fastest kind's micro-batches) (SHOAL_EMULATED_SYNC_S)."""
    if args.exchange_mode == "none":
        return {"env": {}, "sync_micro_batches": 0.0}
    from shoal.perf import step_time
    from shoal.perf.devices import load_devices

    spec, devices = TASKS[task], load_devices()
    options, _ = side_flags(f"fixed-{spec['sweep'][0]}", task, args, calibrating=True)
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"shoal-ab-{task}-calibrate-"))
    cmd = [sys.executable, "-m", "shoal", "run", _adaptive_tasks.__file__]
    steps = 8 if args.smoke else 40
    cmd += ["--workers", args.workers, "--steps", str(steps), "--out", str(out)]
    for key, value in options.items():
        cmd += ["--option", f"{key}={value!r}"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    fastest = devices.parse_workers(args.workers)[0]  # `2xv100,k80` too: the first kind
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    times = [
        w["micro_batch_time_s"]
        for r in rows[steps // 4 :]  # past the first steps' warm-up
        if r.get("kind") == "step"
        for w in r["workers"]
        if w.get("micro_batch_time_s") and w["device"] == fastest
    ]
    # every kind (the fastest too) is paced to the yardstick: a margin over the measured host
    # time keeps the emulated speeds, and so the figures, independent of the host's load
    host_s = YARDSTICK_MARGIN * statistics.median(times)
    priors = [1 / devices.workload_speed(k, None) for k in devices.parse_workers(args.workers)]
    seconds = [p / min(priors) for p in priors]
    m0 = spec["sweep"][0] // spec["b"]
    initial = step_time.step_seconds(step_time.split(m0, seconds), seconds)
    ratio = exchange_ratio(EXCHANGE_APP[task])
    sync = ratio * initial  # in the fastest kind's micro-batches
    return {
        "env": {
            "SHOAL_EMULATED_HOST_S": f"{host_s:.6f}",
            "SHOAL_EMULATED_SYNC_S": f"{sync * host_s:.6f}",
        },
        "sync_micro_batches": sync,
        "app": EXCHANGE_APP[task],
        "ratio": ratio,
        "host_s": host_s,
    }


def run_side(side: str, task: str, seed: int, args) -> dict:
    """One seeded run of a side: one `shoal run` to --max-steps that keeps a checkpoint every
    --eval-every steps; each is evaluated here as it appears, and the run is stopped (SIGTERM)
    once one meets the target. The per-run figures."""
    options, flags = side_flags(side, task, args)
    options["seed"] = seed
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"shoal-ab-{task}-{side}-"))
    target, better = args.targets[task], TASKS[task]["metric"]
    cmd = [sys.executable, "-m", "shoal", "run", _adaptive_tasks.__file__]
    cmd += ["--workers", args.workers, "--steps", str(args.max_steps), "--out", str(out), *flags]
    cmd += ["--checkpoint-every", str(args.eval_every), "--checkpoint-keep", "0"]
    cmd += ["--checkpoint-seconds", "0"]
    for key, value in options.items():
        cmd += ["--option", f"{key}={value!r}"]
    log = open(out / "bench.log", "w")  # noqa: SIM115 (closed below)
    env = os.environ | args.exchange[task]["env"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    evals, met = [], False
    while not met:
        finished = proc.poll() is not None  # read before the checkpoints: none is missed
        for step, path in _checkpoints(out)[len(evals) :]:
            state = torch.load(path, weights_only=True)
            evals.append((step, evaluate(task, state["model"])))
            met = (evals[-1][1] >= target) if better == "accuracy" else (evals[-1][1] <= target)
            if met and not args.smoke:  # the smoke run goes on: it checks the whole stream
                proc.terminate()
                break
            met = False
        if finished:
            break
        time.sleep(0.2)
    code = proc.wait()
    log.close()
    if code != 0 and not met:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(out / 'bench.log').read_text()[-2000:]}")
    return summarise(out, evals, target, better)


def summarise(out: pathlib.Path, evals, target: float, better: str) -> dict:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if r.get("kind") == "step"}  # a redone step: the last
    reached = next(
        (s for s, m in evals if (m >= target if better == "accuracy" else m <= target)), None
    )
    upto = [steps[s] for s in sorted(steps) if reached is not None and s < reached]
    batches = [steps[s].get("global_batch_size") for s in sorted(steps)]
    return {
        "reached": reached is not None,
        "steps": reached,
        "samples": sum(r["global_batch_size"] for r in upto) if upto else None,
        "wall_s": sum(r["step_time_s"] for r in upto) if upto else None,
        "gpu_s": sum(r["step_time_s"] * len(r["workers"]) for r in upto) if upto else None,
        "final_metric": evals[-1][1],
        "evals": evals,
        "batch_first_last": [batches[0], batches[-1]] if batches else None,
        "out": str(out),
    }


def aggregate(runs: list[dict]) -> dict:
    """Mean and min..max over seeds of each figure (over the runs that reached the target)."""
    agg = {"reached": f"{sum(r['reached'] for r in runs)}/{len(runs)}"}
    for key in ("steps", "samples", "wall_s", "gpu_s", "final_metric"):
        values = [r[key] for r in runs if r[key] is not None]
        agg[key] = (
            {"mean": statistics.mean(values), "min": min(values), "max": max(values)}
            if values
            else None
        )
    return agg


def best_fixed(sides: dict[str, dict]) -> str | None:
    """The sweep's side with the lowest mean wall time to target among those always reaching it."""
    ok = [
        (agg["wall_s"]["mean"], side)
        for side, agg in sides.items()
        if side.startswith("fixed-")
        and agg["wall_s"]
        and agg["reached"].split("/")[0] == agg["reached"].split("/")[1]
    ]
    return min(ok)[1] if ok else None


def table(results: dict) -> str:
    lines = []
    for task, res in results["tasks"].items():
        ex = res["exchange"]
        exchange = (
            f"exchange {ex['sync_micro_batches']:.2f} micro-batches ({ex['app']}'s ratio "
            f"{ex['ratio']:.2f}; host {ex['host_s'] * 1e3:.2f} ms per micro-batch)"
            if ex["sync_micro_batches"]
            else "no emulated exchange"
        )
        lines.append(
            f"\n{task} (target {res['target']}; best fixed: {res['best_fixed']}; {exchange})"
        )
        lines.append("| side | reached | steps | samples | wall s | GPU-s | final metric |")
        lines.append("|---|---|---|---|---|---|---|")
        for side, agg in res["sides"].items():
            cells = [
                fmt_spread(agg["steps"], 0),
                fmt_spread(agg["samples"], 0),
                fmt_spread(agg["wall_s"]),
            ]
            cells += [fmt_spread(agg["gpu_s"]), fmt_spread(agg["final_metric"], 3)]
            lines.append(f"| {side} | {agg['reached']} | " + " | ".join(cells) + " |")
    for note in results["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _sides(text: str) -> list[str]:
    """A comma list of sides: fixed-B (B a whole number >= 1) or an adaptive policy."""
    sides = text.split(",")
    for side in sides:
        batch = side.removeprefix("fixed-")
        if side not in ADAPTIVE and not (batch != side and batch.isdecimal() and int(batch) > 0):
            raise argparse.ArgumentTypeError(
                f"unknown side {side!r} (fixed-B for a global batch B, or one of "
                f"{', '.join(ADAPTIVE)})"
            )
    return sides


def check_args(p: argparse.ArgumentParser, args) -> None:
    """Bounds and checks across options, before any run (a usage error, not a failed run)."""
    for flag in ("eval_every", "max_steps", "batch_every"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if not 0 <= args.target_digits <= 1:
        p.error(f"--target-digits is an accuracy from 0 to 1, not {args.target_digits}")
    for flag in ("target_shakespeare", "target_reverse", "toy_target"):
        if not 0 < getattr(args, flag) < math.inf:
            p.error(f"--{flag.replace('_', '-')} must be a loss above 0, not {getattr(args, flag)}")
    for side in args.sides or ():
        for task in ["digits"] if args.smoke else args.tasks:
            b = TASKS[task]["b"]
            if side.startswith("fixed-") and int(side.removeprefix("fixed-")) % b:
                p.error(f"--sides: {side}: the batch is not a multiple of {task}'s micro-batch {b}")
    _args.check_out_file(p, "--json", args.json)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--tasks",
        type=_args.names(TASKS, "task"),
        default="digits,shakespeare",
        help="comma list of digits, shakespeare, reverse",
    )
    p.add_argument(
        "--seeds", type=_args.seeds, default=None, help="comma list (None: 0,1,2; --toy: 0..15)"
    )
    p.add_argument(
        "--sides", type=_sides, default=None, help="comma list (None: the sweep + adaptive)"
    )
    p.add_argument(
        "--workers", type=_args.workers, default="v100,k80,k80", help="the emulated cluster's kinds"
    )
    p.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
    p.add_argument("--max-steps", type=int, default=600, help="a run's steps at most")
    p.add_argument("--batch-every", type=int, default=10, help="steps between batch decisions")
    p.add_argument(
        "--target-digits", type=float, default=0.975, help="validation accuracy to reach"
    )
    p.add_argument("--target-shakespeare", type=float, default=2.3, help="validation loss to reach")
    p.add_argument("--target-reverse", type=float, default=0.3, help="validation loss to reach")
    p.add_argument(
        "--smoke", action="store_true", help="digits, one seed, 2 x 2 steps per side, target 0"
    )
    p.add_argument("--json", default=None, help="also write the JSON object here")
    p.add_argument(
        "--exchange",
        dest="exchange_mode",
        choices=("pollux", "none"),
        default="pollux",
        help="the emulated cluster's gradient exchange: Pollux's measured ratio or none "
        "(loopback's)",
    )
    p.add_argument("--toy", action="store_true", help="the model study only (numpy, seconds)")
    p.add_argument("--toy-target", type=float, default=1.5e-4, help="--toy's target excess loss")
    args = p.parse_args()
    check_args(p, args)
    torch.set_num_threads(1)  # the evaluations share the host with the run's workers
    if args.toy:
        seeds = args.seeds or list(range(16))
        sides = toy_study(seeds, args.toy_target, args.batch_every)
        print(json.dumps({"toy": sides, "target": args.toy_target, "seeds": seeds}))
        print(toy_table(sides))
        return
    args.seeds = args.seeds or [0, 1, 2]
    if args.smoke:
        args.tasks, args.seeds, args.workers = ["digits"], [0], "v100,k80"
        args.eval_every, args.max_steps, args.batch_every = 2, 4, 2
        args.target_digits = 0.0  # every evaluation meets it: the figures' plumbing runs
    args.targets = {
        "digits": args.target_digits,
        "shakespeare": args.target_shakespeare,
        "reverse": args.target_reverse,
    }
    results = {"workers": args.workers, "exchange": args.exchange_mode, "tasks": {}, "notes": []}
    args.exchange = {}
    for task in args.tasks:
        args.exchange[task] = calibrate(task, args)
        sweep = [f"fixed-{b}" for b in TASKS[task]["sweep"]]
        if args.smoke:
            sweep = [sweep[0], sweep[-1]]
        sides = args.sides or sweep + list(ADAPTIVE)
        per_side = {}
        for side in sides:
            runs = [run_side(side, task, seed, args) for seed in args.seeds]
            per_side[side] = aggregate(runs) | {"runs": runs}
        results["tasks"][task] = {
            "target": args.targets[task],
            "exchange": {k: v for k, v in args.exchange[task].items() if k != "env"},
            "sides": per_side,
            "best_fixed": best_fixed(per_side),
        }
    text = json.dumps(results, default=str)
    print(text)
    if args.json:
        pathlib.Path(args.json).write_text(text)
    print(table(results))


if __name__ == "__main__":
    main()
