"""Runs a case table in 2 gloo processes on 127.0.0.1 and collects one result per case.

Each case is a function ``case(rank) -> None`` that raises on a mismatch; the harness records
"ok" or the error text per rank, so one spawn covers many cases (process start-up dominates).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, modules: list[str], port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60))
    cases = {k: v for m in modules for k, v in __import__(m).CASES.items()}
    results = {}
    for name, fn in cases.items():
        try:
            torch.manual_seed(0)
            fn(rank)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=6)
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(results, fh)
    dist.destroy_process_group()


def run_cases(modules: list[str]) -> dict[str, list[str]]:
    """Spawn the ranks; returns case name -> per-rank result ("ok" or a traceback)."""
    for module in modules:  # import once here; the forked ranks inherit the modules
        __import__(module)
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(
            _worker,
            args=(modules, free_port(), out_dir),
            nprocs=WORLD_SIZE,
            join=True,
            # fork: the ranks inherit the imported torch (start-up dominates on 2 cores);
            # spawn if the parent already runs Python threads, which fork does not copy safely
            start_method="fork" if threading.active_count() == 1 else "spawn",
        )
        per_rank = []
        for rank in range(WORLD_SIZE):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as fh:
                per_rank.append(json.load(fh))
    return {name: [r[name] for r in per_rank] for name in per_rank[0]}
