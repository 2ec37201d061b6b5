"""Progressive optimization of the GPT model under a memory cap (cf. Slapo's Figure 9); JSON.

    .venv/bin/python bench/schedule_progressive.py [--memory-cap-mb 600] [--steps 3]

Four stages, each adding one schedule feature to the previous: vanilla (no schedule) -> + fusion
(q/k/v fused into one GEMM) -> + activation checkpointing (every block) -> + tensor parallelism
(2 gloo processes). Every process runs one torch thread: on a 2-core machine that other jobs
also load, two OpenMP threads in one process mostly wait for each other, which would measure the
machine's load rather than the schedule. As in Slapo's ablation, each stage runs at the largest
micro-batch size that fits: `shoal.tune.tune` measures every candidate batch size
in a fresh process (candidates above a size that broke the cap are skipped), and the stage
reports the largest one whose peak resident memory per process stays under the cap. Throughput
is given twice: wall-clock samples/s (what a user gets, but moved by other processes on a shared
machine) and CPU seconds per sample summed over processes (the work done, robust to that
noise). Prints one JSON object with every trial and the stage table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform

import _args
import optuna
import torch

from shoal.tune import SearchSpace, TrialSpec, tune

N_HEAD = 4
STAGES = [  # (label, fusion, ckpt_ratio, world_size)
    ("vanilla", False, 0.0, 1),
    ("+ fusion", True, 0.0, 1),
    ("+ checkpointing", True, 1.0, 1),
    ("+ tensor parallelism", True, 1.0, 2),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--memory-cap-mb", type=float, default=600.0, help="peak memory per process")
    p.add_argument(
        "--batch-sizes", type=_args.sizes, default="2,4,8,16,32", help="candidate micro-batch sizes"
    )
    p.add_argument("--n-layer", type=int, default=8, help="GPT blocks")
    p.add_argument("--n-embd", type=int, default=128, help="embedding width")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=3, help="measured steps per trial")
    args = p.parse_args(argv)
    if not args.memory_cap_mb > 0:  # NaN too
        p.error(f"--memory-cap-mb must be above 0, not {args.memory_cap_mb}")
    for flag in ("n_layer", "n_embd", "seq_len", "steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if args.n_embd % N_HEAD:
        p.error(f"--n-embd must be a multiple of the {N_HEAD} attention heads, not {args.n_embd}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = {
        "n_layer": args.n_layer,
        "n_embd": args.n_embd,
        "n_head": N_HEAD,
        "vocab_size": 1024,
        "block_size": args.seq_len,
    }
    batch_sizes = tuple(args.batch_sizes)
    stages, vanilla = [], None
    for label, fusion, ratio, world in STAGES:
        base = TrialSpec(
            model_config=cfg,
            seq_len=args.seq_len,
            world_size=world,
            threads=1,
            steps=args.steps,
            warmup_steps=1,
        )
        space = SearchSpace(micro_batch_sizes=batch_sizes, ckpt_ratios=(ratio,), fusion=(fusion,))
        result = tune(base, space, args.memory_cap_mb, n_trials=space.size)
        fits = [t for t in result.trials if t.feasible]
        best = max(fits, key=lambda t: t.micro_batch_size) if fits else None
        row = {
            "stage": label,
            "processes": world,
            "trials": [dataclasses.asdict(t) for t in result.trials],
        }
        if best is not None:
            vanilla = vanilla or best.samples_per_s
            row.update(
                micro_batch_size=best.micro_batch_size,
                samples_per_s=round(best.samples_per_s, 3),
                cpu_s_per_sample=round(best.cpu_time_s / best.micro_batch_size, 4),
                peak_rss_mb_per_process=round(best.peak_memory_mb, 1),
                speedup_vs_vanilla=round(best.samples_per_s / vanilla, 3),
            )
        stages.append(row)
    print(
        json.dumps(
            {
                "bench": "schedule_progressive",
                "model_config": cfg,
                "seq_len": args.seq_len,
                "memory_cap_mb": args.memory_cap_mb,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "stages": stages,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
