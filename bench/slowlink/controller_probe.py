"""The worker of the controller probe: each step emulates compute with a sleep, compresses a
synthetic model's gradients with error feedback at the controller's keep ratio, exchanges them
across the sites (all-gather of the packed messages, or a dense all-reduce at keep 1), and the
controller on rank 0 reads the measured exchange and sets the next step's ratio. The driver
changes the link rate between phases; rank 0 writes each phase's per-step rows as JSON."""

import argparse
import json
import math
import pathlib
import time

import torch
import torch.distributed as dist

from shoal.control.bandwidth import BandwidthController, LinkSample, entries, sent_bytes_per_site
from shoal.runtime.compress import ErrorFeedback

SIZES = [1_048_576, 786_432, 131_072, 65_536, 2048, 512]  # about 2M parameters, 8 MB in fp32


def encode(grads, keep, ef_by_keep) -> torch.Tensor:
    """The step's outgoing buffer: the dense gradient at keep 1, else the packed messages."""
    if keep >= 1.0:
        return torch.cat(grads)
    ef = ef_by_keep.setdefault(keep, ErrorFeedback(keep, "block"))
    return torch.cat([ef.compress(f"t{i}", g) for i, g in enumerate(grads)])


def exchange(buffer, keep, world) -> None:
    """One step's cross-site exchange (the merge is not needed here)."""
    if keep >= 1.0:
        dist.all_reduce(buffer)
    else:
        dist.all_gather([torch.empty_like(buffer) for _ in range(world)], buffer)


def run_phase(args, phase, ctrl, keep, efs, rank, world):
    rows, ping = [], torch.zeros(1, dtype=torch.uint8)
    for step in range(args.steps):
        gen = torch.Generator().manual_seed(1000 * phase + step)
        grads = [torch.randn(n, generator=gen) for n in SIZES]
        time.sleep(args.compute_s)  # the emulated forward/backward the exchange should hide under
        buffer = encode(grads, keep, efs)
        # The 1-byte exchange also lines the sites up, so the timed one measures the link, not
        # a peer still compressing.
        start = time.perf_counter()
        dist.all_gather([torch.empty(1, dtype=torch.uint8) for _ in range(world)], ping)
        overhead_s = time.perf_counter() - start  # one exchange's fixed cost, bytes aside
        start = time.perf_counter()
        exchange(buffer, keep, world)
        exchange_s = time.perf_counter() - start
        sent = sent_bytes_per_site(SIZES, keep, world)
        decision = torch.zeros(1, dtype=torch.float64)
        if rank == 0:
            sample = LinkSample(sent, exchange_s, args.compute_s, overhead_s)
            decision[0] = ctrl.observe(sample).keep_ratio
        dist.broadcast(decision, 0)
        rows.append(
            {"step": step, "keep_ratio": keep, "exchange_s": exchange_s, "overhead_s": overhead_s}
            | {"bytes": sent}
        )
        keep = float(decision[0])
    return rows, keep


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument(
        "--compute-s", type=float, default=0.1, help="seconds of emulated compute per step"
    )
    parser.add_argument("--phases", type=int, required=True)
    parser.add_argument("--sync-dir", type=pathlib.Path, required=True)
    args = parser.parse_args()
    for flag, value in (("--steps", args.steps), ("--phases", args.phases)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, not {value}")
    if not 0 <= args.compute_s < math.inf:
        parser.error(f"--compute-s must be a number of seconds, at least 0, not {args.compute_s}")
    if not args.sync_dir.is_dir():
        parser.error(f"--sync-dir: no directory {str(args.sync_dir)!r}")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ctrl = BandwidthController(SIZES, world)
    keep, efs = ctrl.keep_ratio, {}
    assert all(entries(n, 1.0) == n for n in SIZES)
    dist.barrier()
    for phase in range(args.phases):
        go = args.sync_dir / f"go{phase}"
        while phase and not go.exists():
            time.sleep(0.02)
        dist.barrier()
        rows, keep = run_phase(args, phase, ctrl, keep, efs, rank, world)
        if rank == 0:
            tmp = args.sync_dir / f"phase{phase}.tmp"
            tmp.write_text(json.dumps({"steps": rows}))
            tmp.rename(args.sync_dir / f"phase{phase}.json")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
