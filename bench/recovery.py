"""Recovery time and lost steps: shoal vs torchrun + periodic checkpoints, same job, one run each.

    python bench/recovery.py [--repeats 3] [--shoal-steps 260] [--torchrun-steps 240]

Job: examples/digits.py, micro_batch_size=32, global_batch_size=256 (M=8 micro-batches).

shoal: `shoal run --workers 2xv100,2xk80` with a 30 s notice to w1 at step 15, a SIGKILL of w2
at step 30 and a v100 joining at step 45 (admitted once it has built its model). Per regroup it
reads the `recover` line (`recovery_time_s`: the old group ended on rank 0, i.e. failure
detected or the leave/join boundary, to the first completed step of the new group;
`lost_steps`) and, as a cross-check, the gap between the step lines' wall clocks.

TorchElastic: bench/torchelastic_job.py (DDP on gloo, a checkpoint every 10 steps, resume from
it) under torchrun `--nnodes=1:2 --nproc-per-node=2 --max-restarts=3` with the c10d rendezvous
on 127.0.0.1: SIGTERM to local rank 1 at step 15, SIGKILL of local rank 1 at step 35, a second
agent (node) started at step 55. Steps 15, 35, 55 are mid-interval, the expected position of
an unplanned event. Each event restarts every worker from the checkpoint; lost steps are those
computed again.

Both sides report the same wall-clock gap: last step completed before the event -> next step
completed beyond it (for TorchElastic, after the redone steps). Prints one JSON object, then a
table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import _args
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "digits.py"
TE_JOB = ROOT / "bench" / "torchelastic_job.py"
OPTIONS = {"micro_batch_size": 32, "global_batch_size": 256}
SHOAL_WORKERS = "2xv100,2xk80"
SHOAL_EVENTS = "step 15: notice 1 30s; step 30: kill 2; step 45: add v100"
SHOAL_CAUSE = {"leave": "notice", "fail": "kill", "join": "join"}
CHECKPOINT_EVERY = 10
TE_EVENTS = [(15, "notice"), (35, "kill"), (55, "join")]  # (steps completed, event)
KINDS = ("notice", "kill", "join")
TIMEOUT_S = 240.0
HOLD_FILE = "hold"  # the TorchElastic job trains on past its steps while this file exists


def machine() -> str:
    cores = len(os.sched_getaffinity(0))
    return (
        f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at start"
    )


def read_jsonl(path: pathlib.Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


# -- shoal -----------------------------------------------------------------------------------
def shoal_command(out: pathlib.Path, steps: int) -> list[str]:
    opts = [a for k, v in OPTIONS.items() for a in ("-o", f"{k}={v}")]
    return [
        *("shoal", "run", str(JOB.relative_to(ROOT)), "--workers", SHOAL_WORKERS),
        *("--steps", str(steps), "--out", str(out), *opts, "--events", SHOAL_EVENTS),
    ]


def run_shoal(out: pathlib.Path, steps: int) -> list[dict]:
    cmd = [sys.executable, "-m", *shoal_command(out, steps)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"shoal run failed:\n{proc.stderr[-2000:]}")
    return shoal_recoveries(out / "metrics.jsonl")


def shoal_recoveries(path: pathlib.Path) -> list[dict]:
    rows = read_jsonl(path)
    steps = [r for r in rows if r["kind"] == "step"]
    causes = [r for r in rows if r["kind"] == "membership" and r["event"] in SHOAL_CAUSE]
    recovers = {
        int(r["detail"].split(":")[0].split()[1]): r
        for r in rows
        if r["kind"] == "membership" and r["event"] == "recover"
    }
    causes.sort(key=lambda r: r["wall_time_s"])
    regroups = [(a, b) for a, b in zip(steps, steps[1:]) if a["generation"] != b["generation"]]
    if len(regroups) != len(causes):
        raise RuntimeError(f"{len(causes)} membership events but {len(regroups)} regroups")
    found = []
    for cause, (before, after) in zip(causes, regroups, strict=True):
        rec = recovers[after["generation"]]
        found.append(
            {
                "event": SHOAL_CAUSE[cause["event"]],
                "worker": cause["worker"],
                "after_step": before["step"],
                "workers": f"{len(before['workers'])}->{len(after['workers'])}",
                "recovery_time_s": rec["recovery_time_s"],
                "lost_steps": rec["lost_steps"],
                "gap_s": after["wall_time_s"] - before["wall_time_s"],
                "step_time_s": statistics.median(
                    s["step_time_s"] for s in steps if s["generation"] == before["generation"]
                ),
            }
        )
    return found


# -- TorchElastic ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(port: int, out: pathlib.Path, steps: int) -> list[str]:
    return [
        *("torchrun", "--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d"),
        *(f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=recovery-bench"),
        # last_call_timeout: a lone node re-rendezvouses after 1 s, not the default 30 s
        *("--rdzv-conf=last_call_timeout=1", "--local-addr=127.0.0.1", "--max-restarts=3"),
        *(str(TE_JOB.relative_to(ROOT)), "--steps", str(steps)),
        *("--checkpoint-every", str(CHECKPOINT_EVERY), "--out", str(out)),
        *("--hold", str(out / HOLD_FILE)),  # past --steps until the last restart is measured
    ]


class Torchrun:
    """Two torchrun agents ("nodes") on this machine; the second starts for the join."""

    def __init__(self, out: pathlib.Path, steps: int):
        self.out, self.steps, self.port = out, steps, free_port()
        self.log = out / "log.jsonl"
        self.agents: list[subprocess.Popen] = []

    def start_agent(self) -> None:
        cmd = [sys.executable, "-m", "torch.distributed.run"]
        cmd += torchrun_command(self.port, self.out, self.steps)[1:]
        # with the rendezvous store shared with the workers (torch 2.13's default) restarted
        # gloo workers often failed or hung in init_process_group (docs/BENCHMARKS.md, section 2)
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        with open(self.out / f"agent{len(self.agents)}.log", "w") as f:
            self.agents.append(
                subprocess.Popen(
                    cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )  # fmt: skip

    def wait_for_step(self, step: int, deadline: float) -> None:
        while not any(r["kind"] == "step" and r["step"] + 1 >= step for r in read_jsonl(self.log)):
            if time.time() > deadline or all(a.poll() is not None for a in self.agents):
                raise RuntimeError(f"torchrun job never reached step {step}: see {self.out}")
            time.sleep(0.01)

    def wait_until_measured(self, fired: list[tuple[str, float]], deadline: float) -> None:
        """Until every fired event's restart has stepped beyond where it struck."""
        while True:
            try:
                torchrun_recoveries(read_jsonl(self.log), fired)
                return
            except (StopIteration, IndexError):
                pass
            if time.time() > deadline or all(a.poll() is not None for a in self.agents):
                return  # run_torchrun reports the failure
            time.sleep(0.05)

    def worker_pid(self, local_rank: int) -> int:
        """The pid of the newest worker process with this local rank on the first agent."""
        starts = [r for r in read_jsonl(self.log) if r["kind"] == "start"]
        return [r["pid"] for r in starts if r["local_rank"] == local_rank][-1]

    def stop(self) -> None:
        """Kill what this script started and is still running: agents, then their workers."""
        for agent in self.agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
        for r in read_jsonl(self.log):  # a hung worker can outlive its killed agent
            if r["kind"] == "start" and _is_ours(r["pid"]):
                os.kill(r["pid"], signal.SIGKILL)


def _is_ours(pid: int) -> bool:
    try:
        return TE_JOB.name in pathlib.Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def run_torchrun(out: pathlib.Path, steps: int) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    job = Torchrun(out, steps)
    deadline = time.time() + TIMEOUT_S
    fired = []
    hold = out / HOLD_FILE
    hold.touch()
    try:
        job.start_agent()
        for at, event in TE_EVENTS:
            job.wait_for_step(at, deadline)
            fired.append((event, time.time()))
            if event == "join":
                job.start_agent()
            else:  # a graceful notice (SIGTERM) or an abrupt loss (SIGKILL) of one worker
                sig = signal.SIGTERM if event == "notice" else signal.SIGKILL
                os.kill(job.worker_pid(local_rank=1), sig)
        job.wait_until_measured(fired, deadline)
        hold.unlink()  # the job ends at --steps, or at once if it is past them
        for agent in job.agents:
            agent.wait(timeout=max(1.0, deadline - time.time()))
        if any(agent.returncode != 0 for agent in job.agents):
            raise RuntimeError(f"a torchrun agent failed: see {out}/agent*.log")
    finally:
        job.stop()
    try:
        return torchrun_recoveries(read_jsonl(job.log), fired)
    except (StopIteration, IndexError) as exc:  # e.g. the run ended before the join
        raise RuntimeError(
            f"torchrun run in {out}: an event was not followed by a restart"
        ) from exc


def torchrun_recoveries(rows: list[dict], fired: list[tuple[str, float]]) -> list[dict]:
    steps = [r for r in rows if r["kind"] == "step"]
    found = []
    for event, t_event in fired:
        # the restart: the first worker process started after the event
        restart = next(r for r in rows if r["kind"] == "start" and r["time"] > t_event)
        before = [s for s in steps if s["time"] < restart["time"]][-1]
        resumed = next(r for r in rows if r["kind"] == "resumed" and r["time"] > restart["time"])
        first = next(s for s in steps if s["time"] > resumed["time"])
        beyond = next(
            s for s in steps if s["time"] > first["time"] - 1e-9 and s["step"] > before["step"]
        )
        old = [
            s["time"]
            for s in steps
            if s["time"] <= before["time"] and s["world"] == before["world"]
        ]
        found.append(
            {
                "event": event,
                "after_step": before["step"],
                "workers": f"{before['world']}->{resumed['world_size']}",
                "checkpoint_step": resumed["step"],
                "lost_steps": before["step"] + 1 - resumed["step"],
                "restart_s": first["time"] - before["time"],  # -> first (redone) step
                "gap_s": beyond["time"] - before["time"],  # -> first step beyond `before`
                "from_event_s": beyond["time"] - t_event,
                "step_time_s": statistics.median(b - a for a, b in zip(old[-11:], old[-10:])),
            }
        )
    return found


# -- report ----------------------------------------------------------------------------------
def median_of(runs: list[list[dict]], event: str, key: str) -> float | None:
    values = [r[key] for run in runs for r in run if r["event"] == event]
    return statistics.median(values) if values else None


def summarize(shoal: list[list[dict]], te: list[list[dict]]) -> dict:
    table = {}
    for event in KINDS:
        table[event] = {
            "shoal_recovery_time_s": median_of(shoal, event, "recovery_time_s"),
            "shoal_gap_s": median_of(shoal, event, "gap_s"),
            "shoal_lost_steps": median_of(shoal, event, "lost_steps"),
            "torchelastic_gap_s": median_of(te, event, "gap_s"),
            "torchelastic_restart_s": median_of(te, event, "restart_s"),
            "torchelastic_lost_steps": median_of(te, event, "lost_steps"),
        }
    all_shoal = [r["recovery_time_s"] for run in shoal for r in run]
    return {
        "per_event": table,
        "shoal_median_recovery_time_s": statistics.median(all_shoal) if all_shoal else None,
        "shoal_max_lost_steps": max((r["lost_steps"] for run in shoal for r in run), default=None),
        "shoal_joins_admitted": sum(r["event"] == "join" for run in shoal for r in run),
    }


def print_table(summary: dict) -> None:
    def cell(v, unit=""):
        return "-" if v is None else (f"{v:.2f}{unit}" if unit else f"{v:g}")

    head = ("event", "shoal rec.", "shoal gap", "shoal lost", "TE gap", "TE restart", "TE lost")
    print("  ".join(f"{h:>11}" for h in head))
    for event, row in summary["per_event"].items():
        cells = [
            event,
            cell(row["shoal_recovery_time_s"], " s"),
            cell(row["shoal_gap_s"], " s"),
            cell(row["shoal_lost_steps"]),
            cell(row["torchelastic_gap_s"], " s"),
            cell(row["torchelastic_restart_s"], " s"),
            cell(row["torchelastic_lost_steps"]),
        ]
        print("  ".join(f"{c:>11}" for c in cells))


def check_args(p: argparse.ArgumentParser, args) -> None:
    """Before any run: each side's steps go past its last event (else the side fails or
    measures nothing), and --out can be the runs' directory."""
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, not {args.repeats}")
    last_shoal = max(int(e.split(":")[0].split()[1]) for e in SHOAL_EVENTS.split(";"))
    last_te = max(at for at, _ in TE_EVENTS)
    for side, flag, steps, last in (
        ("shoal", "--shoal-steps", args.shoal_steps, last_shoal),
        ("torchrun", "--torchrun-steps", args.torchrun_steps, last_te),
    ):
        if args.sides in ("both", side) and steps <= last:
            p.error(f"{flag} must be more than {last} (the step of its last event), not {steps}")
    _args.check_out_dir(p, "--out", args.out)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--repeats", type=int, default=3, help="whole runs of each side")
    p.add_argument("--shoal-steps", type=int, default=260, help="long enough for the join")
    p.add_argument(
        "--torchrun-steps", type=int, default=240, help="at least (on until the join is measured)"
    )
    p.add_argument("--out", default=None, help="keep the runs here (None: a temp dir)")
    p.add_argument(
        "--sides",
        choices=["both", "shoal", "torchrun"],
        default="both",
        help="which side(s) to run (one side alone: a smoke run, or a look at one)",
    )
    args = p.parse_args()
    check_args(p, args)
    root = pathlib.Path(args.out or tempfile.mkdtemp(prefix="shoal-recovery-"))
    started, host = time.time(), machine()
    shoal_runs, te_runs, failures = [], [], []

    def attempt(run, name: str, steps: int) -> list[dict]:
        """A run that fails (e.g. a hung restart) is reported, then tried once more."""
        for tries in range(2):
            try:
                return run(root / f"{name}-{tries}", steps)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{name}-{tries}: {str(exc).splitlines()[0]}")
        raise RuntimeError(f"{name} failed twice: {failures[-2:]}")

    for i in range(args.repeats):  # interleaved, so drift in the machine's load hits both
        if args.sides in ("both", "shoal"):
            shoal_runs.append(attempt(run_shoal, f"shoal-{i}", args.shoal_steps))
        if args.sides in ("both", "torchrun"):
            te_runs.append(attempt(run_torchrun, f"torchrun-{i}", args.torchrun_steps))
    summary = summarize(shoal_runs, te_runs)
    result = {
        "job": f"{JOB.relative_to(ROOT)} {OPTIONS}",
        "machine": host,
        "repeats": args.repeats,
        "shoal_command": " ".join(shoal_command(root / "shoal-0-0", args.shoal_steps)),
        "torchrun_command": " ".join(
            torchrun_command(29400, root / "torchrun-0-0", args.torchrun_steps)
        ),
        "torchrun_events": [f"step {s}: {e}" for s, e in TE_EVENTS],
        **summary,
        "shoal_runs": shoal_runs,
        "torchelastic_runs": te_runs,
        "failed_runs": failures,
        "bench_wall_time_s": time.time() - started,
        "runs_dir": str(root),
    }
    print(json.dumps(result))
    print_table(summary)


if __name__ == "__main__":
    main()
