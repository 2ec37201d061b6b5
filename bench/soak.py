"""Soak: a long seeded run through many membership events and a total loss, ending bitwise where
the uninterrupted run ends.

    python bench/soak.py                        # the full soak: 2,000 steps, >= 100 events
    python bench/soak.py --steps 150 --events 8 --checkpoint-every 20 --loss-at 60 --host-s 0.01
                                                # the short version tests/dist/test_soak.py runs

Job: examples/digits.py, micro_batch_size=32, global_batch_size=256 (M=8), on `shoal run
--workers v100,k80,k80`. A generator seeded by --seed draws the events: each departure (an
abrupt kill, a revocation without notice, i.e. a SIGKILL of a random member, or a notice with a
30 s deadline) is followed two steps later by a join of a random kind, so the group keeps about
three members; a stall (SIGSTOP for STALL_S seconds, past the run's --peer-timeout, then
SIGCONT) needs no join: the group goes on without the worker, which comes back as a newcomer.
Steps are paced (SHOAL_EMULATED_HOST_S, --host-s seconds per micro-batch at the fastest kind) so
that joiners start within a few steps. At --loss-at (default: 60% of the steps) the launcher and
every worker are SIGKILLed at once (a total loss, as when the host goes); the run is then
continued with --resume, with the events still to come, from its newest durable checkpoint
(--checkpoint-every).

Reports (one JSON object, then a table): events scheduled and survived (fail, leave, join
lines in metrics.jsonl), steps lost per abrupt kill (the `recover` lines' lost_steps, which must
total at most one per kill while a worker survives), the recovery-time distribution, the steps
the total loss cost (its step minus the checkpoint resumed from), and whether the final digest
equals the uninterrupted run's (computed in this process: one worker is every layout). A stall
is two membership events, the loss and the rejoin.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import _args

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOB = str(ROOT / "examples" / "digits.py")
OPTIONS = {"micro_batch_size": 32, "global_batch_size": 256}
WORKERS = "v100,k80,k80"
JOIN_KINDS = ("v100", "k80")
# revoke: a revocation without notice (SIGKILL); stall: SIGSTOP past the peer timeout, then
# SIGCONT (the group goes on without the worker, which comes back as a newcomer: no join paired)
DEPARTURES = ("kill", "revoke", "notice", "stall")
PEER_TIMEOUT_S, STALL_S = 5, 10
PHASE_TIMEOUT_S = 1800.0
ORPHAN_WAIT_S = 30.0  # for the killed processes to be gone (a check: none should be left)
sys.path.insert(0, str(ROOT / "src"))  # shoal, for the reference run and the checkpoint reader


def schedule(
    seed: int, steps: int, n_events: int, loss_at: int, departures=DEPARTURES
) -> list[tuple[int, str, str]]:
    """(step, category, event text) for `n_events` events, in pairs (departure, join two steps
    later), spread over the run and kept clear of the total loss."""
    rng = random.Random(seed)
    pairs = max(n_events // 2, 1)
    clear = set(range(loss_at - 3, loss_at + 8))  # the loss and the resume's first steps
    candidates = [s for s in range(4, steps - 6) if s not in clear and s + 2 not in clear]
    starts = sorted(rng.sample(candidates, min(pairs, len(candidates))))
    events = []
    texts = {"notice": "notice random 30s", "stall": f"stall random {STALL_S}s"}
    for s in starts:
        kind = rng.choice(departures)
        events.append((s, kind, f"step {s}: {texts.get(kind, 'kill random')}"))
        if kind != "stall":
            events.append((s + 2, "join", f"step {s + 2}: add {rng.choice(JOIN_KINDS)}"))
    return events[:n_events] if n_events >= 2 else events


def _shoal(
    out: pathlib.Path, steps: int, events: list, host_s: float, *extra: str
) -> subprocess.Popen:
    opts = [part for k, v in OPTIONS.items() for part in ("-o", f"{k}={v}")]
    cmd = [sys.executable, "-m", "shoal", "run", JOB, "--workers", WORKERS, "--steps",
           str(steps), "--peer-timeout", str(PEER_TIMEOUT_S), *opts, *extra]  # fmt: skip
    if events:
        cmd += ["--events", "; ".join(text for _, _, text in events)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SHOAL_EMULATED_HOST_S": str(host_s)}
    # a session of its own: the launcher and its workers are one process group, waited for whole
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def _wait_group_gone(pgid: int, timeout_s: float) -> tuple[float, int]:
    """Wait until no process of the group is left (the orphaned workers have exited); after
    `timeout_s`, SIGKILL the ones left. (seconds waited, orphans that had to be killed)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if not _group_pids(pgid):
            return time.monotonic() - started, 0
        time.sleep(0.1)
    left = _group_pids(pgid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return time.monotonic() - started, len(left)


def _group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    pids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _steps_done(metrics: pathlib.Path) -> int:
    if not metrics.exists():
        return 0
    steps = re.findall(rb'"kind": "step", "step": (\d+)', metrics.read_bytes())
    return max((int(s) + 1 for s in steps), default=0)


def _run_until_loss(
    out: pathlib.Path, steps: int, events: list, loss_at: int, every: int, host_s: float
) -> tuple[int, tuple[float, int]]:
    """Train until `loss_at` steps are done, then SIGKILL the launcher; the steps done when
    its workers are all gone, and (seconds they took to go, orphans killed after the wait)."""
    proc = _shoal(out, steps, events, host_s, "--out", str(out), "--checkpoint-every", str(every))
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while _steps_done(out / "metrics.jsonl") < loss_at:
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended before the total loss: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("no progress before the total loss: the run hangs")
        time.sleep(0.05)
    # the total loss: the launcher and every worker at once, as when the host goes. (Killing
    # only the launcher is not one: its workers train on without it; see docs/notes/soak.md.)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    orphans = _wait_group_gone(proc.pid, ORPHAN_WAIT_S)
    return _steps_done(out / "metrics.jsonl"), orphans


def _resume(
    out: pathlib.Path, steps: int, events: list, every: int, host_s: float
) -> tuple[int | None, dict]:
    """Continue the run; (the checkpoint step it resumed from, result.json)."""
    from shoal.runtime.checkpoint import latest_checkpoint_step

    resumed_from = latest_checkpoint_step(str(out / "checkpoints"))
    proc = _shoal(
        out, steps, events, host_s, "--resume", str(out), "--checkpoint-every", str(every)
    )
    try:
        _, err = proc.communicate(timeout=PHASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError("the resumed run hangs") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the resumed run failed: {err.decode()[-2000:]}")
    return resumed_from, json.loads((out / "result.json").read_text())


def reference_digest(steps: int) -> str:
    """The uninterrupted run's digest, computed in this process (one worker, --threads 1)."""
    import torch

    from shoal.job import build_job, load_job_file
    from shoal.runtime.state import state_sha256
    from shoal.runtime.trainer import Trainer

    torch.set_num_threads(1)
    trainer = Trainer(build_job(load_job_file(JOB), dict(OPTIONS), None))
    while trainer.step < steps:
        trainer.train_step()
    return state_sha256(trainer.model, trainer.optimizer)


def summarize(out: pathlib.Path, events: list, loss: dict, result: dict, digest: str) -> dict:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    member = [r for r in lines if r.get("kind") == "membership"]
    kinds = ("fail", "leave", "join", "recover", "stall")
    count = {e: sum(r["event"] == e for r in member) for e in kinds}
    # a stall loses the step in flight like a kill; its worker is declared lost (a fail line)
    # only if it is still silent when the group re-forms, else it wakes into the new group
    stall_fails = sum(r["event"] == "fail" and "stalled" in (r.get("detail") or "") for r in member)
    abrupt = count["fail"] + count["stall"] - stall_fails
    recovers = [r for r in member if r["event"] == "recover"]
    times = sorted(r["recovery_time_s"] for r in recovers if r.get("recovery_time_s") is not None)
    lost = sum(r.get("lost_steps") or 0 for r in recovers)
    scheduled = {c: sum(c == cat for _, cat, _ in events) for c in (*DEPARTURES, "join")}

    def quantile(q: float) -> float | None:
        return times[min(int(q * len(times)), len(times) - 1)] if times else None

    return {
        "steps": result["final_step"],
        "events_scheduled": sum(scheduled.values()) + 1,  # + the total loss
        "scheduled_by_kind": {**scheduled, "total_loss": 1},
        # scheduled events seen to happen: a stall is its stall line (a stalled worker that was
        # declared lost adds a fail and a rejoin, neither of them scheduled)
        "events_survived": abrupt + count["leave"] + count["join"] - stall_fails + 1,
        "membership_lines": count,
        "abrupt_failures": abrupt,  # kills, revocations without notice, stalls
        "steps_lost_to_abrupt_failures": lost,
        "at_most_one_lost_step_per_failure": lost <= abrupt,
        "recovery_time_s": {
            "n": len(times),
            "median": statistics.median(times) if times else None,
            "p90": quantile(0.9),
            "max": times[-1] if times else None,
        },
        "total_loss": loss,
        "state_sha256": result["state_sha256"],
        "reference_sha256": digest,
        "digest_matches": result["state_sha256"] == digest,
    }


def soak(
    steps: int,
    n_events: int,
    seed: int,
    every: int,
    loss_at: int,
    out: pathlib.Path,
    host_s: float = 0.02,
    departures: tuple[str, ...] = DEPARTURES,
) -> dict:
    events = schedule(seed, steps, n_events, loss_at, departures)
    done, (orphans_s, orphans_killed) = _run_until_loss(out, steps, events, loss_at, every, host_s)
    later = [e for e in events if e[0] > done]  # those before the loss fired, or never will
    resumed_from, result = _resume(out, steps, later, every, host_s)
    loss = {
        "at_step": done,
        "resumed_from": resumed_from,
        "steps_lost": done - (resumed_from or 0),
        "orphans_gone_after_s": orphans_s,
        "orphans_killed_after_wait": orphans_killed,  # workers the launcher's death left alive
    }
    return summarize(out, events, loss, result, reference_digest(steps))


def check_args(p: argparse.ArgumentParser, args, loss_at: int) -> None:
    """Before any run: a total loss inside the run, a durable checkpoint before it to resume
    from, at least one event, a pace and a directory for the run."""
    if args.steps < 2:
        p.error(f"--steps must be at least 2 (a step before the total loss), not {args.steps}")
    if not 1 <= loss_at < args.steps:
        p.error(f"--loss-at must be from 1 to --steps - 1 = {args.steps - 1}, not {loss_at}")
    if not 1 <= args.checkpoint_every <= loss_at:
        p.error(
            f"--checkpoint-every must be from 1 to the total loss's step {loss_at} (a checkpoint "
            f"to resume from), not {args.checkpoint_every}"
        )
    if args.events < 1:
        p.error(f"--events must be at least 1, not {args.events}")
    if not 0 < args.host_s < math.inf:
        p.error(f"--host-s must be a positive number of seconds, not {args.host_s}")
    _args.check_out_dir(p, "--out", args.out)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=2000, help="steps of the run")
    p.add_argument("--events", type=int, default=120, help="drawn (a stall draws no join)")
    p.add_argument("--seed", type=int, default=0, help="seeds the events")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument(
        "--loss-at", type=int, default=None, help="the total loss's step (None: 60%% of the steps)"
    )
    p.add_argument("--host-s", type=float, default=0.02, help="paced seconds per micro-batch")
    p.add_argument("--out", default=None, help="run directory (None: a temporary one)")
    args = p.parse_args()
    loss_at = args.loss_at if args.loss_at is not None else int(args.steps * 0.6)
    check_args(p, args, loss_at)
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="shoal-soak-")) / "run"
    started = time.monotonic()
    report = soak(
        args.steps, args.events, args.seed, args.checkpoint_every, loss_at, out, args.host_s
    )
    report["wall_s"] = time.monotonic() - started
    print(json.dumps(report, indent=2))
    r = {
        k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in report["recovery_time_s"].items()
    }
    print(
        f"\n| steps | events survived | abrupt failures | steps lost | recovery median / p90 / "
        f"max (s) | total loss: steps lost | digest |\n|---|---|---|---|---|---|---|\n"
        f"| {report['steps']} | {report['events_survived']} / {report['events_scheduled']} | "
        f"{report['abrupt_failures']} | {report['steps_lost_to_abrupt_failures']} | "
        f"{r['median']} / {r['p90']} / {r['max']} | {report['total_loss']['steps_lost']} | "
        f"{'matches' if report['digest_matches'] else 'DIFFERS'} |"
    )


if __name__ == "__main__":
    main()
