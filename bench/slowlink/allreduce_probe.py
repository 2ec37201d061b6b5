"""The worker of the test bed's probe: timed gloo all-reduces, in phases the driver separates by
changing the link rate. Rank 0 writes each phase's throughput as JSON into the sync folder."""

import argparse
import json
import math
import pathlib
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--size-mb", type=float, required=True)
    parser.add_argument("--iters", type=int, required=True)
    parser.add_argument("--phases", type=int, required=True)
    parser.add_argument("--sync-dir", type=pathlib.Path, required=True)
    args = parser.parse_args()
    if not 0 < args.size_mb < math.inf:
        parser.error(f"--size-mb must be a size above 0, not {args.size_mb}")
    for flag, value in (("--iters", args.iters), ("--phases", args.phases)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, not {value}")
    if not args.sync_dir.is_dir():
        parser.error(f"--sync-dir: no directory {str(args.sync_dir)!r}")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = torch.ones(int(args.size_mb * 2**20 / 4))
    dist.all_reduce(data)  # connections up before any timing
    for phase in range(args.phases):
        go = args.sync_dir / f"go{phase}"
        while phase and not go.exists():  # the driver changes the rate, then says go
            time.sleep(0.02)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(data)
        elapsed = time.perf_counter() - start
        # A ring all-reduce puts 2 (W-1)/W of the tensor on each rank's link per call.
        sent = 2 * (world - 1) / world * data.numel() * 4 * args.iters
        if rank == 0:
            row = {"mbit_per_s": sent * 8 / elapsed / 1e6, "seconds": elapsed, "bytes": sent}
            tmp = args.sync_dir / f"phase{phase}.tmp"
            tmp.write_text(json.dumps(row))
            tmp.rename(args.sync_dir / f"phase{phase}.json")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
