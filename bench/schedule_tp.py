"""Tensor parallelism on 2 gloo processes: numerics vs. the unscheduled model, and throughput.

    .venv/bin/python bench/schedule_tp.py [--steps 3] [--skip-throughput]

Numerics: both ranks build each library model from the same seed, keep an unscheduled copy,
apply the library schedule over the 2 ranks (no checkpointing), run one forward/backward on the
same batch and report the largest absolute difference of the outputs and of the gradients
(sharded gradients against the matching slice of the reference gradient), float32.
Throughput: `run_trial` on the GPT model (fresh processes; samples/s from the median step):
one process with 1 and with 2 torch threads, and 2 tensor-parallel processes with 1 thread each
(the same 2 cores), `--repeats` interleaved runs each. `cpu_s_per_sample` is CPU seconds per
sample summed over processes (the work done; unlike wall time barely moved by other processes on
the machine). Peak memory is the largest per-process `ru_maxrss`. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import socket
import statistics
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shoal.tune import TrialSpec, run_trial

NUMERICS = {
    "gpt2": {"n_layer": 4, "n_embd": 256, "n_head": 8, "vocab_size": 1024, "block_size": 128},
    "bert": {"num_layers": 4, "hidden_size": 256, "num_heads": 8, "intermediate_size": 1024},
    "llama": {"n_layers": 4, "dim": 256, "n_heads": 8, "vocab_size": 1024, "max_seq_len": 128},
    "wideresnet": {"depth": 16, "widen_factor": 4},
}
SEQ = {"gpt2": 128, "bert": 64, "llama": 128, "wideresnet": 16}


def _numerics_rank(rank: int, port: int, out_dir: str) -> None:
    from shoal.models import get_model_entry
    from shoal.schedule.model_schedule import apply_schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    results = {}
    for name, overrides in NUMERICS.items():
        entry = get_model_entry(name)
        cfg = entry.make_config(**overrides)
        torch.manual_seed(0)
        ref = entry.build(cfg)
        model = apply_schedule(copy.deepcopy(ref), name, group=dist.group.WORLD).mod
        inputs = entry.make_inputs(cfg, 4, SEQ[name], torch.Generator().manual_seed(1))
        out_ref, out = ref(*inputs), model(*inputs)
        entry.loss(out_ref, inputs).backward()
        entry.loss(out, inputs).backward()
        ref_grads = dict(ref.named_parameters())
        grad_diff, grad_scale, sharded = 0.0, 0.0, 0
        for pname, p in model.named_parameters():
            full = ref_grads[pname].grad
            if full.shape != p.shape:
                (axis,) = [d for d in range(full.dim()) if full.shape[d] != p.shape[d]]
                full = full.chunk(2, dim=axis)[rank]
                sharded += 1
            grad_diff = max(grad_diff, (p.grad - full).abs().max().item())
            grad_scale = max(grad_scale, full.abs().max().item())
        results[name] = {
            "params_per_rank": sum(p.numel() for p in model.parameters()),
            "params_unsharded": sum(p.numel() for p in ref.parameters()),
            "sharded_tensors": sharded,
            "max_abs_out_diff": (out - out_ref).abs().max().item(),
            "max_abs_out": out_ref.abs().max().item(),
            "max_abs_grad_diff": grad_diff,
            "max_abs_grad": grad_scale,
        }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(results, fh)
    dist.destroy_process_group()


def numerics() -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_numerics_rank, args=(port, out_dir), nprocs=2, join=True)
        ranks = []
        for r in range(2):
            with open(os.path.join(out_dir, f"rank{r}.json")) as fh:
                ranks.append(json.load(fh))
    merged = {}
    for name in NUMERICS:
        row = dict(ranks[0][name])
        for key in ("max_abs_out_diff", "max_abs_grad_diff"):
            row[key] = max(r[name][key] for r in ranks)
        merged[name] = row
    return merged


def throughput(steps: int, batch_size: int, repeats: int) -> list[dict]:
    cfg = {"n_layer": 4, "n_embd": 512, "n_head": 8, "vocab_size": 1024, "block_size": 256}
    layouts = ((1, 1), (1, 2), (2, 1))  # (processes, threads per process)
    runs: dict[tuple[int, int], list] = {lay: [] for lay in layouts}
    for _ in range(repeats):  # interleaved, so a busy spell hits every layout alike
        for world, threads in layouts:
            spec = TrialSpec(
                model_config=cfg,
                micro_batch_size=batch_size,
                seq_len=256,
                world_size=world,
                threads=threads,
                steps=steps,
                warmup_steps=1,
            )
            out = run_trial(spec, timeout_s=600)
            if out.status != "ok":
                raise SystemExit(f"world {world} threads {threads}: {out.status} {out.detail}")
            runs[(world, threads)].append(out)
    rows = []
    for (world, threads), outs in runs.items():
        rows.append(
            {
                "processes": world,
                "threads_per_process": threads,
                "samples_per_s_best": round(max(o.samples_per_s for o in outs), 3),
                "samples_per_s_median": round(statistics.median(o.samples_per_s for o in outs), 3),
                "cpu_s_per_sample": round(min(o.cpu_time_s for o in outs) / batch_size, 4),
                "peak_rss_mb_per_process": round(max(o.peak_memory_mb for o in outs), 1),
            }
        )
    return [{"model_config": cfg, "batch_size": batch_size, "seq_len": 256}, *rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=3, help="throughput: measured steps per run")
    p.add_argument("--batch-size", type=int, default=8, help="throughput: sequences per step")
    p.add_argument("--repeats", type=int, default=2, help="fresh runs per layout")
    p.add_argument("--skip-throughput", action="store_true", help="the numerics only")
    args = p.parse_args(argv)
    for flag in ("steps", "batch_size", "repeats"):  # checked before the numerics run
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    result = {
        "bench": "schedule_tp",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "numerics": numerics(),
    }
    if not args.skip_throughput:
        result["throughput"] = throughput(args.steps, args.batch_size, args.repeats)
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
