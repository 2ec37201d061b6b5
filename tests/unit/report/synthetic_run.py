"""A made-up run directory, in the format `shoal run` writes, for the report tests and the bench.

`write_synthetic_run` plays a small elastic job without any training: three workers of
different kinds start, one fails abruptly a quarter of the way in (its in-flight step is lost
and redone), a faster worker joins, another leaves gracefully on notice, and the failed worker
comes back. Each step's split is the real planner's (`plan_micro_batches`) over the device
table's speeds, so the share plot moves at each change as it would in a run, and every line is
written through the metrics schema. Everything is derived from `seed`: the files reproduce.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import replace
from functools import cache
from pathlib import Path

from shoal.metrics.files import METRICS_FILE, RESULT_FILE, RunResult
from shoal.metrics.training import MembershipEvent, StepLine, WorkerShare
from shoal.perf.devices import load_devices
from shoal.plan import plan_micro_batches

INITIAL = {"w0": "v100", "w1": "k80", "w2": "p100"}  # id -> device kind, in rank order
JOINER = ("w3", "v100")  # the worker that joins mid-run
MICRO_BATCH_TIME_S = 0.06  # of the fastest catalogued device
DETECT_S = 1.5  # failure -> detected (heartbeat timeout)
REPLAN_S = 0.6  # detected/notified -> new plan agreed
DETAIL = {
    "fail": "SIGKILL (injected); in-flight step abandoned",
    "join": "new worker admitted at step boundary",
    "leave": "revocation notice 30s; left at step boundary",
}


@cache
def relative_speed(kind: str) -> float:
    """A device kind's speed relative to the fastest kind, from the device table.

    The one place the fixture reads the table, so that moving the table moves one line.
    """
    return load_devices().workload_speed(kind)


def split(num_micro_batches: int, kinds: list[str]) -> tuple[int, ...]:
    """The planner's split of a step over workers of these kinds (in rank order)."""
    times = [MICRO_BATCH_TIME_S / relative_speed(k) for k in kinds]
    return plan_micro_batches(num_micro_batches, times).counts


def _script(num_steps: int) -> dict[int, tuple[str, str, str]]:
    """step in flight -> (event, worker, device)."""
    return {
        round(num_steps * 0.25): ("fail", "w1", INITIAL["w1"]),
        round(num_steps * 0.45): ("join", *JOINER),
        round(num_steps * 0.65): ("leave", "w2", INITIAL["w2"]),
        round(num_steps * 0.82): ("join", "w1", INITIAL["w1"]),
    }


def _step_line(
    step: int, num_steps: int, alive: dict[str, str], rng: random.Random, batch: tuple[int, int]
) -> StepLine:
    """One step of the current group; `wall_time_s` is filled in by the caller."""
    global_batch_size, micro_batch_size = batch
    ids = sorted(alive)
    counts = split(global_batch_size // micro_batch_size, [alive[w] for w in ids])
    shares, busiest = [], 0.0
    for rank, (w, n) in enumerate(zip(ids, counts, strict=True)):
        mb_time = MICRO_BATCH_TIME_S / relative_speed(alive[w]) * rng.uniform(0.95, 1.05)
        busiest = max(busiest, n * mb_time)
        shares.append(WorkerShare(w, rank, alive[w], n, round(mb_time, 5)))
    step_time = busiest + 0.004  # + the exact all-reduce
    loss = 2.1 * math.exp(-step / (num_steps / 3)) + 0.25 + rng.gauss(0, 0.03)
    return StepLine(
        step=step,
        loss=round(loss, 5),
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
        step_time_s=round(step_time, 5),
        samples_per_s=round(global_batch_size / step_time, 2),
        workers=tuple(shares),
    )


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
    alive = dict(INITIAL)
    script = _script(num_steps)
    num_micro = global_batch_size // micro_batch_size
    records: list[StepLine | MembershipEvent] = []
    wall = 0.0
    pending: MembershipEvent | None = None  # the change awaiting its first completed step

    for step in range(1, num_steps + 1):
        if step in script:
            event, worker, device = script[step]
            if event == "fail":
                # killed mid-step: the partial step is lost; the event is logged on detection
                wall += rng.uniform(0.2, 0.8) * MICRO_BATCH_TIME_S * num_micro + DETECT_S
            pending = MembershipEvent(
                event, worker, device, step, round(wall, 4), detail=DETAIL[event]
            )
            records.append(pending)
            if event == "join":
                alive[worker] = device
            else:
                del alive[worker]
            wall += REPLAN_S  # recovery time = this re-plan + the first step on the new plan
        line = _step_line(step, num_steps, alive, rng, (global_batch_size, micro_batch_size))
        wall += line.step_time_s or 0.0
        records.append(replace(line, wall_time_s=round(wall, 4)))
        if pending is not None:
            assert pending.wall_time_s is not None
            records.append(
                MembershipEvent(
                    "recover",
                    pending.worker,
                    pending.device,
                    step,
                    round(wall, 4),
                    recovery_time_s=round(wall - pending.wall_time_s, 4),
                    lost_steps=1 if pending.event == "fail" else 0,
                    detail=f"{len(alive)} workers; state from surviving peer",
                )
            )
            pending = None

    text = "".join(json.dumps(r.to_json()) + "\n" for r in records)
    (directory / METRICS_FILE).write_text(text, encoding="utf-8")
    if write_result:
        kinds = list(dict.fromkeys([*INITIAL.values(), JOINER[1]]))  # first use order
        result = RunResult(
            final_step=num_steps,
            state_sha256=hashlib.sha256(f"synthetic-{seed}-{num_steps}".encode()).hexdigest(),
            wall_time_s=round(wall, 4),
            samples_per_s=round(num_steps * global_batch_size / wall, 2),
            consistency="exact",
            workers=tuple(kinds),
        )
        (directory / RESULT_FILE).write_text(json.dumps(result.to_json(), indent=2))
    return directory
