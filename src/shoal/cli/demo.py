"""`shoal demo`: the digits job on a mixed emulated cluster and on one worker, side by side."""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile

from shoal.cli.flags import ascii_int, nonempty

DIGITS = pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="a mixed cluster and one worker side by side: shares, throughput, digests",
        description="Train examples/digits.py on an emulated mixed cluster and on one worker; "
        "print each worker's share of the micro-batches, the throughputs and whether the two "
        "final state digests are identical.",
    )
    p.add_argument("--steps", type=ascii_int, default=40, help="training steps of each run")
    p.add_argument(
        "--out", type=nonempty, default=None, help="keep the two runs here (default: a temp dir)"
    )
    p.add_argument("--mixed", default="v100,k80,k80", help="the mixed cluster's worker spec")
    p.set_defaults(func=_demo)


def _shares(steps, num_workers: int) -> list[float]:
    totals = [0] * num_workers
    for step in steps:
        for w in step.workers:
            totals[w.rank] += w.micro_batches
    return [t / sum(totals) for t in totals]


def _steady_samples_per_s(steps, warmup: int = 5) -> float:
    """Throughput once warm: the median step after the first few (start-up, step 0's probe)."""
    steady = steps[warmup:] or steps
    return steady[0].global_batch_size / statistics.median(s.step_time_s for s in steady)


def _same_device_for_both(workers: int) -> str | None:
    """Both runs train on the same kind of device, or their bits could not agree (a GPU's
    kernels are not the CPU's): where CUDA shows fewer GPUs than the mixed run has workers
    (each needs its own: `launcher.gpus`), the demo hides them from both runs. What it says
    of it, or None."""
    from shoal.launcher.gpus import visible_gpus

    shown = len(visible_gpus())
    if not shown or shown >= workers:
        return None
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # read by the launcher and the workers it starts
    return (
        f"(both runs on the CPU: the mixed run's {workers} workers need a GPU each and CUDA "
        f"shows {shown}; a GPU and the CPU give different bits)"
    )


def _demo(args: argparse.Namespace) -> int:
    from shoal.config import EmulationConfig, RunConfig
    from shoal.errors import UserError
    from shoal.launcher.spec import RunSpec, run_local
    from shoal.perf.devices import load_devices
    from shoal.report.load import load_run

    if not DIGITS.is_file():
        raise UserError(f"the demo needs {DIGITS} (run it from a source checkout)")
    root = pathlib.Path(args.out or tempfile.mkdtemp(prefix="shoal-demo-"))
    kinds = load_devices().parse_workers(args.mixed)
    for name in ("mixed", "single"):  # the run's own refusal said "pass --resume", no demo flag
        if any((root / name / "checkpoints").glob("ckpt-*.json")):
            raise UserError(
                f"--out {root}: {root / name} holds an earlier run; choose another --out"
            )
    where = _same_device_for_both(len(kinds))
    options = ["micro_batch_size=32", "global_batch_size=256"]  # M = 8 micro-batches per step
    runs = {}
    for name, workers in (("mixed", kinds), ("single", kinds[:1])):
        print(f"{name}: {','.join(workers)}")
        config = RunConfig(
            str(DIGITS),
            args.steps,
            str(root / name),
            options=options,
            emulation=EmulationConfig.from_environ(),
        )
        runs[name] = (workers, run_local(RunSpec(config, workers)))
    print()
    print(f"{'run':<8} {'workers':<16} {'samples/s':>10}  {'micro-batch share':<24} state_sha256")
    print(f"{'':<8} {'':<16} {'(steady)':>10}")
    speed = {}
    for name, (workers, result) in runs.items():
        steps = load_run(root / name).steps
        speed[name] = _steady_samples_per_s(steps)
        shares = _shares(steps, len(workers))
        share_text = " ".join(f"{k}:{s:.0%}" for k, s in zip(workers, shares, strict=True))
        print(
            f"{name:<8} {','.join(workers):<16} {speed[name]:>10,.0f}  "
            f"{share_text:<24} {result['state_sha256'][:16]}"
        )
    same = runs["mixed"][1]["state_sha256"] == runs["single"][1]["state_sha256"]
    speedup = speed["mixed"] / speed["single"]
    print()
    print(f"digests identical: {'YES' if same else 'NO'}   mixed/single throughput: {speedup:.2f}x")
    cores = len(os.sched_getaffinity(0))
    print(
        f"(emulated on {cores} CPU cores that all {len(kinds)} workers share; with a device per "
        "worker the mixed cluster adds the K80s' speed)"
    )
    if where:
        print(where)
    print(f"runs kept in {root}")
    return 0 if same else 1
