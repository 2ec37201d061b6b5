"""A made-up run directory, in the format `shoal run` writes, for tests, docs and demos.

`write_synthetic_run` plays a small elastic job without any training: three workers of
different speeds start, one fails abruptly a quarter of the way in (its in-flight step is
lost and redone), a faster worker joins, another leaves gracefully on notice, and the failed
worker comes back. Micro-batches are split in proportion to device speed, so the share plot
moves at each change. Everything is derived from `seed`, so the files are reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

# relative speed per device kind (micro-batches per unit time); only the ratios matter
SPEED = {"v100": 1.0, "k80": 0.35, "t4": 0.5, "a100": 1.6}
MICRO_BATCH_TIME_S = 0.06  # of a speed-1.0 device
DETECT_S = 1.5  # failure -> detected (heartbeat timeout)
REPLAN_S = 0.6  # detected/notified -> new plan agreed


def split_micro_batches(num: int, speeds: list[float]) -> list[int]:
    """Split `num` micro-batches in proportion to `speeds` (largest remainder, ties to first)."""
    total = sum(speeds)
    exact = [num * s / total for s in speeds]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(speeds)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: num - sum(counts)]:
        counts[i] += 1
    return counts


def write_synthetic_run(
    directory: str | Path,
    *,
    num_steps: int = 40,
    seed: int = 0,
    global_batch_size: int = 64,
    micro_batch_size: int = 8,
    write_result: bool = True,
) -> Path:
    """Write `metrics.jsonl` (and `result.json`) of a synthetic elastic run; return the dir."""
    if num_steps < 8:
        raise ValueError(f"num_steps must be >= 8 to fit the scripted events, got {num_steps}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    alive = {"w0": "v100", "w1": "k80", "w2": "t4"}
    # step -> (event, worker, device); the step is the one in flight when it happens
    script = {
        round(num_steps * 0.25): ("fail", "w1", "k80"),
        round(num_steps * 0.45): ("join", "w3", "a100"),
        round(num_steps * 0.65): ("leave", "w2", "t4"),
        round(num_steps * 0.82): ("join", "w1", "k80"),
    }
    num_micro = global_batch_size // micro_batch_size
    records: list[dict] = []
    wall = 0.0
    pending: dict | None = None  # the change awaiting its first completed step

    for step in range(1, num_steps + 1):
        if step in script:
            event, worker, device = script[step]
            detail = {
                "fail": "SIGKILL (injected); in-flight step abandoned",
                "join": "new worker admitted at step boundary",
                "leave": "revocation notice 30s; left at step boundary",
            }[event]
            if event == "fail":
                # killed mid-step: the partial step is lost; the event is logged on detection
                wall += rng.uniform(0.2, 0.8) * MICRO_BATCH_TIME_S * num_micro + DETECT_S
            records.append(
                {
                    "kind": "membership",
                    "event": event,
                    "worker": worker,
                    "device": device,
                    "step": step,
                    "wall_time_s": round(wall, 4),
                    "detail": detail,
                }
            )
            if event == "join":
                alive[worker] = device
            else:
                del alive[worker]
            pending = {
                "worker": worker,
                "device": device,
                "step": step,
                "since": wall,
                "lost": 1 if event == "fail" else 0,
            }
            wall += REPLAN_S  # recovery time = this re-plan + the first step on the new plan
        ids = sorted(alive)
        counts = split_micro_batches(num_micro, [SPEED[alive[w]] for w in ids])
        workers = []
        busiest = 0.0
        for rank, (w, n) in enumerate(zip(ids, counts, strict=True)):
            mb_time = MICRO_BATCH_TIME_S / SPEED[alive[w]] * rng.uniform(0.95, 1.05)
            busiest = max(busiest, n * mb_time)
            workers.append(
                {
                    "id": w,
                    "rank": rank,
                    "device": alive[w],
                    "micro_batches": n,
                    "micro_batch_time_s": round(mb_time, 5),
                }
            )
        step_time = busiest + 0.004  # + the exact all-reduce
        wall += step_time
        loss = 2.1 * math.exp(-step / (num_steps / 3)) + 0.25 + rng.gauss(0, 0.03)
        records.append(
            {
                "kind": "step",
                "step": step,
                "loss": round(loss, 5),
                "global_batch_size": global_batch_size,
                "micro_batch_size": micro_batch_size,
                "step_time_s": round(step_time, 5),
                "samples_per_s": round(global_batch_size / step_time, 2),
                "wall_time_s": round(wall, 4),
                "workers": workers,
            }
        )
        if pending is not None:
            records.append(
                {
                    "kind": "membership",
                    "event": "recover",
                    "worker": pending["worker"],
                    "device": pending["device"],
                    "step": step,
                    "wall_time_s": round(wall, 4),
                    "recovery_time_s": round(wall - pending["since"], 4),
                    "lost_steps": pending["lost"],
                    "detail": f"{len(alive)} workers; state from surviving peer",
                }
            )
            pending = None

    lines = [json.dumps(r) for r in records]
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if write_result:
        result = {
            "final_step": num_steps,
            "state_sha256": hashlib.sha256(f"synthetic-{seed}-{num_steps}".encode()).hexdigest(),
            "wall_time_s": round(wall, 4),
            "samples_per_s": round(num_steps * global_batch_size / wall, 2),
            "consistency": "exact",
            "workers": ["v100", "k80", "t4", "a100"],  # device kinds used, first use order
        }
        (directory / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return directory
