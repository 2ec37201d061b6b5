"""Activation checkpointing on the GPT model: peak memory saved vs. step-time overhead; JSON.

    .venv/bin/python bench/schedule_ckpt.py [--ratios 0,0.25,0.5,0.75,1] [--rounds 6] ...

Memory: every ratio is measured by `shoal.tune.run_trial` in a fresh process (the
library GPT schedule with `ckpt_ratio`, no tensor parallelism, SGD training steps), so the peak
is that process's own. `peak_rss_mb` is `getrusage(RUSAGE_SELF).ru_maxrss` after the steps;
`train_rss_mb` is the part a training step adds (peak minus the resident size between steps,
after a warm-up step: activations, gradients, logits, temporaries). The runner sets glibc's
`MALLOC_MMAP_THRESHOLD_=65536` in the trial process, so freed tensor memory leaves the resident
set at once and the resident size follows the live tensors.

Time: one process holds one scheduled copy per ratio (same weights) and times single forward +
backward passes round-robin over the ratios for `--rounds` rounds; `step_time_s` is the median
per ratio, and `cpu_step_time_s` the median CPU time of the process (one torch thread) for the
same steps. Interleaving by step spreads the load of other processes on a shared machine over
the ratios; CPU time is barely moved by that load at all. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time

import _args
import torch

from shoal.models import get_model_entry
from shoal.schedule.model_schedule import apply_schedule
from shoal.tune import TrialSpec, run_trial


def step_times(cfg: dict, ratios: list[float], batch: int, seq: int, rounds: int) -> dict:
    entry = get_model_entry("gpt2")
    config = entry.make_config(**cfg)
    torch.manual_seed(0)
    base = entry.build(config)
    models = {r: apply_schedule(copy.deepcopy(base), "gpt2", ckpt_ratio=r).mod for r in ratios}
    inputs = entry.make_inputs(config, batch, seq, torch.Generator().manual_seed(1))
    wall: dict[float, list[float]] = {r: [] for r in ratios}
    cpu: dict[float, list[float]] = {r: [] for r in ratios}
    for rnd in range(rounds + 1):  # round 0 warms up every model
        for r, model in models.items():
            model.zero_grad(set_to_none=True)
            start, cpu_start = time.perf_counter(), time.process_time()
            entry.loss(model(*inputs), inputs).backward()
            if rnd:
                wall[r].append(time.perf_counter() - start)
                cpu[r].append(time.process_time() - cpu_start)
    return {r: (statistics.median(wall[r]), statistics.median(cpu[r])) for r in ratios}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--ratios",
        type=_args.ratios,
        default="0,0.25,0.5,0.75,1",
        help="ckpt_ratio values, comma list",
    )
    p.add_argument("--n-layer", type=int, default=8, help="GPT blocks")
    p.add_argument("--n-embd", type=int, default=128, help="embedding width")
    p.add_argument("--n-head", type=int, default=4, help="attention heads")
    p.add_argument("--vocab-size", type=int, default=1024, help="vocabulary size")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    p.add_argument("--rounds", type=int, default=6, help="timed steps per ratio")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    sizes = ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len", "batch_size", "rounds")
    for flag in (*sizes, "threads"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} must be a multiple of --n-head {args.n_head}")
    cfg = {
        "n_layer": args.n_layer,
        "n_embd": args.n_embd,
        "n_head": args.n_head,
        "vocab_size": args.vocab_size,
        "block_size": args.seq_len,
    }
    ratios = args.ratios
    rows = []
    for ratio in ratios:
        spec = TrialSpec(
            model_config=cfg,
            micro_batch_size=args.batch_size,
            seq_len=args.seq_len,
            ckpt_ratio=ratio,
            steps=1,
            warmup_steps=1,
            threads=args.threads,
        )
        out = run_trial(spec, timeout_s=600)
        if out.status != "ok":
            raise SystemExit(f"ratio {ratio}: {out.status} {out.detail}")
        train = out.peak_memory_mb - out.raw["resident_between_steps_mb"]
        rows.append(
            {
                "ckpt_ratio": ratio,
                "checkpointed_blocks": int(args.n_layer * ratio),
                "peak_rss_mb": round(out.peak_memory_mb, 1),
                "train_rss_mb": round(train, 1),
            }
        )
    torch.set_num_threads(args.threads)
    medians = step_times(cfg, ratios, args.batch_size, args.seq_len, args.rounds)
    base = rows[0]
    for row in rows:
        row["step_time_s"] = round(medians[row["ckpt_ratio"]][0], 4)
        row["cpu_step_time_s"] = round(medians[row["ckpt_ratio"]][1], 4)
        row["train_rss_saved_pct"] = round(
            100 * (1 - row["train_rss_mb"] / base["train_rss_mb"]), 1
        )
        row["time_overhead_pct"] = round(100 * (row["step_time_s"] / base["step_time_s"] - 1), 1)
        cpu_ratio = row["cpu_step_time_s"] / base["cpu_step_time_s"]
        row["cpu_time_overhead_pct"] = round(100 * (cpu_ratio - 1), 1)
    print(
        json.dumps(
            {
                "bench": "schedule_ckpt",
                "model_config": cfg,
                "batch_size": args.batch_size,
                "seq_len": args.seq_len,
                "threads": args.threads,
                "rounds": args.rounds,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "rows": rows,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
