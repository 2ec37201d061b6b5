"""One measured trial of a schedule configuration, run in its own process.

This module owns what a trial *is* (`TrialSpec`: model, size, knobs) and how it is measured:
build the model, apply its library schedule (`shoal.schedule.model_schedule`), run a few warm-up
and timed training steps (forward, backward, SGD step), and report throughput (from the median
step time) and peak memory.
It runs in a fresh interpreter (`python -m shoal.tune '<spec json>'`) so that
the peak resident set size (`getrusage(RUSAGE_SELF).ru_maxrss`) belongs to this configuration
alone; it also reports the resident size between steps (after warm-up), so that the difference
is what a training step adds. With `world_size > 1` it starts that many gloo processes (tensor
parallelism) and reports the largest values over ranks. On CUDA the peak is
`torch.cuda.max_memory_allocated` instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import socket
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

RESULT_PREFIX = "SHOAL_TRIAL_RESULT "


@dataclass(frozen=True)
class TrialSpec:
    """A configuration to measure. `seq_len` is the image side for WideResNet."""

    model: str = "gpt2"
    model_config: dict[str, Any] = field(default_factory=dict)
    micro_batch_size: int = 4
    seq_len: int = 32
    ckpt_ratio: float = 0.0
    fusion: bool = False
    world_size: int = 1
    warmup_steps: int = 1
    steps: int = 3
    device: str = "cpu"
    threads: int = 0  # torch threads per process; 0 = cores // world_size
    seed: int = 0

    def __post_init__(self) -> None:
        if self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if not 0.0 <= self.ckpt_ratio <= 1.0:
            raise ValueError(f"ckpt_ratio must be in [0, 1], got {self.ckpt_ratio}")
        for name, least in (("world_size", 1), ("steps", 1), ("warmup_steps", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: auto), got {self.threads}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        return cls(**json.loads(text))


def _peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _resident_mb(device: str) -> float:
    """Memory in use now: resident set size on CPU, allocated bytes on CUDA."""
    import torch

    if device == "cuda":
        return torch.cuda.memory_allocated() / 2**20
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: fall back to the high-water mark
        return _peak_memory_mb(device)


def measure(spec: TrialSpec, group: Any = None) -> dict[str, float]:
    """Build, schedule and train `spec` in this process; return its measurements."""
    import torch

    from shoal.models import get_model_entry
    from shoal.schedule.model_schedule import apply_schedule

    world = max(spec.world_size, 1)
    torch.set_num_threads(spec.threads or max(1, (os.cpu_count() or 1) // world))
    entry = get_model_entry(spec.model)
    cfg = entry.make_config(**spec.model_config)
    torch.manual_seed(spec.seed)  # identical initial weights on every rank before sharding
    model = entry.build(cfg)
    if spec.world_size > 1 or spec.ckpt_ratio > 0 or spec.fusion:
        sch = apply_schedule(
            model, spec.model, ckpt_ratio=spec.ckpt_ratio, fusion=spec.fusion, group=group
        )
        model = sch.mod
    device = torch.device(spec.device)
    model.to(device).train()
    gen = torch.Generator().manual_seed(spec.seed + 1)
    inputs = tuple(
        t.to(device) for t in entry.make_inputs(cfg, spec.micro_batch_size, spec.seq_len, gen)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = entry.loss(model(*inputs), inputs)
        loss.backward()
        opt.step()
        return float(loss)

    for _ in range(spec.warmup_steps):
        step()
    # What the process holds between steps (weights, lazily imported code, allocator caches);
    # the peak minus this is what a training step adds: activations, gradients, temporaries.
    opt.zero_grad(set_to_none=True)
    base_mb = _resident_mb(spec.device)
    if spec.device == "cuda":
        torch.cuda.synchronize()
    times, cpu_times, loss = [], [], 0.0
    for _ in range(spec.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        loss = step()
        if spec.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        # CPU seconds of this process (all its threads): unlike wall time, barely moved by other
        # processes competing for the cores, so it tracks the work a configuration does.
        cpu_times.append(time.process_time() - cpu_start)
    # The median step: robust to a neighbour process stealing the CPU for one step.
    step_time_s = statistics.median(times)
    peak_mb = _peak_memory_mb(spec.device)
    return {
        "step_time_s": step_time_s,
        "step_times_s": times,
        "cpu_time_s": statistics.median(cpu_times),
        "samples_per_s": spec.micro_batch_size / step_time_s,
        "peak_memory_mb": peak_mb,
        "resident_between_steps_mb": base_mb,
        "loss": loss,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, spec: TrialSpec, port: int, queue: Any) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=spec.world_size
    )
    try:
        queue.put((rank, measure(spec, group=dist.group.WORLD), None))
    except Exception as exc:
        # The parent reports the rank's error line: an exit code alone hides the cause (a
        # config the schedule refuses, say). Raised again for the traceback on stderr.
        line = "".join(traceback.format_exception_only(exc)).strip().splitlines()[0]
        queue.put((rank, None, line))
        raise
    finally:
        dist.destroy_process_group()


def measure_distributed(spec: TrialSpec) -> dict[str, float]:
    """Run `measure` on `spec.world_size` gloo ranks; step time and peak are the max over ranks."""
    import torch.multiprocessing as mp

    # fork on CPU: the ranks inherit the imported torch instead of importing it again (seconds
    # each); this process has run no torch op yet, so no thread pool is copied mid-flight.
    # CUDA cannot be forked, so spawn there.
    ctx = mp.get_context("spawn" if spec.device == "cuda" else "fork")
    queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, spec, port, queue)) for r in range(spec.world_size)
    ]
    for p in procs:
        p.start()
    results, errors = {}, {}
    for p in procs:
        p.join()
    while not queue.empty():
        rank, res, error = queue.get()
        if error is None:
            results[rank] = res
        else:
            errors[rank] = error
    if errors:  # the first failed rank's cause; the others usually say the same
        rank = min(errors)
        raise RuntimeError(f"rank {rank} of {spec.world_size} failed: {errors[rank]}")
    if len(results) != spec.world_size:  # killed without a word (e.g. by the kernel)
        codes = [p.exitcode for p in procs]
        raise RuntimeError(f"{spec.world_size - len(results)} rank(s) failed, exit codes {codes}")
    out = dict(results[0])
    for key in ("step_time_s", "peak_memory_mb", "resident_between_steps_mb"):
        out[key] = max(r[key] for r in results.values())
    out["cpu_time_s"] = sum(r["cpu_time_s"] for r in results.values())  # over all ranks
    out["samples_per_s"] = spec.micro_batch_size / out["step_time_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m shoal.tune '<TrialSpec json>'\n")
        return 2
    spec = TrialSpec.from_json(argv[0])
    result = measure(spec) if spec.world_size == 1 else measure_distributed(spec)
    # One marked line so that library chatter on stdout cannot be mistaken for the result.
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0
