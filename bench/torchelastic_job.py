"""The TorchElastic baseline for bench/recovery.py: plain torchrun + DDP with periodic checkpoints.

    torchrun --nnodes=1:2 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29400 --max-restarts=3 bench/torchelastic_job.py \
        --steps 80 --checkpoint-every 10 --out DIR

Written as a TorchElastic user writes it, following the torchrun docs: the same model, data,
optimizer and global batch as examples/digits.py (micro_batch_size=32, global_batch_size=256),
DDP on gloo, rank 0 saves {model, optimizer, step} every K steps (torch.save to a temporary
file, then an atomic rename), and every (re)started worker loads the newest checkpoint. On any
failure, notice or new node, torchrun stops every worker and starts them again; whatever was
computed after the last checkpoint is computed again.

With `--hold FILE` the job goes on training past --steps while FILE exists (every rank agrees
through an all-reduce of what it saw): bench/recovery.py removes it once it has measured the
restart of its last event, which a fixed step count could end before (a joining agent takes
seconds to start; at ~15 ms a step, 15 steps after the join were not enough).

It logs to DIR/log.jsonl (appended, one line per event, wall clock `time`):
`start` (a worker process began: pid, rank, local rank, world size, restart count),
`resumed` (the step it restored from the checkpoint) and `step` (rank 0, after each
optimizer step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

import _args
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from digits import load_digits, make_model  # noqa: E402  (the same model and data)


def log(path: pathlib.Path, record: dict) -> None:
    with open(path, "a") as f:  # O_APPEND: lines from several processes do not interleave
        f.write(json.dumps({**record, "time": time.time()}) + "\n")


def held(path: str | None) -> bool:
    """Whether every rank still sees the hold file (an all-reduce: they stop at the same step)."""
    if path is None:
        return False
    seen = torch.tensor([float(pathlib.Path(path).exists())])
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    return bool(seen.item())


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (K)")
    p.add_argument("--out", required=True)
    p.add_argument("--global-batch-size", type=int, default=256, help="samples per step")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="seeds the model and the data order")
    p.add_argument("--hold", default=None, help="past --steps, go on while this file exists")
    args = p.parse_args()
    for flag in ("steps", "checkpoint_every", "global_batch_size"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if not 0 < args.lr < math.inf:
        p.error(f"--lr must be a learning rate above 0, not {args.lr}")
    _args.check_out_dir(p, "--out", args.out)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    events, ckpt = out / "log.jsonl", out / "checkpoint.pt"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    log(
        events,
        {
            "kind": "start",
            "pid": os.getpid(),
            "rank": rank,
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "world_size": world,
            "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
        },
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo")

    x, y = load_digits()
    images = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(y)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step = 0
    if ckpt.exists():  # the user's resume path: the newest periodic checkpoint
        state = torch.load(ckpt, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    if rank == 0:
        log(events, {"kind": "resumed", "step": step, "world_size": world})

    per_rank = args.global_batch_size // world
    n = len(labels)
    while step < args.steps or held(args.hold):
        # global batch `step` of a per-epoch shuffled order; each rank takes its slice
        epoch, offset = divmod(step * args.global_batch_size, n)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch))
        batch = order[(offset + rank * per_rank + torch.arange(per_rank)) % n]
        model.train()
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        step += 1
        if rank == 0:
            log(events, {"kind": "step", "step": step - 1, "loss": loss.item(), "world": world})
            if step % args.checkpoint_every == 0:
                tmp = ckpt.with_suffix(".tmp")
                torch.save(
                    {
                        "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "step": step,
                    },
                    tmp,
                )
                os.replace(tmp, ckpt)  # atomic: a crash mid-write leaves the previous one
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
