"""Membership changes and failures leave the trained state bitwise unchanged."""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from shoal_testing import DIGITS, free_port, metrics, shoal_run

pytestmark = pytest.mark.dist
HEAVY = ["-o", "micro_batch_size=32", "-o", "global_batch_size=256"]  # M = 8
PACED = {"SHOAL_EMULATED_HOST_S": "0.01"}
STEPS, CHAOS_STEPS = 40, 150


class References(dict):
    """The digest of an uninterrupted single-worker run of `steps`, run when first asked for
    (the 150-step one only the slow tests need)."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, steps):
        out = self.tmp.mktemp(f"ref{steps}")
        self[steps] = shoal_run(out, "v100", steps, *HEAVY)["state_sha256"]
        return self[steps]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted single-worker runs: the digests every elastic run must reproduce."""
    return References(tmp_path_factory)


def membership(out):
    return [r for r in metrics(out) if r["kind"] == "membership"]


@pytest.mark.slow  # ~60 s; the short soak (tests/dist/test_soak.py) mixes kills and joins too
def test_ten_random_kills_and_joins(reference, tmp_path):
    rng = random.Random(2026)
    kill_steps = sorted(rng.sample(range(4, 80), 10))
    events = []
    for step in kill_steps:
        events.append(f"step {max(step - 3, 0)}: add {rng.choice(['v100', 'k80'])}")
        events.append(f"step {step}: kill random")
    out = tmp_path / "chaos"
    result = shoal_run(
        out,
        "2xv100,2xk80",
        CHAOS_STEPS,
        *HEAVY,
        "--events",
        "; ".join(events),
        env={"SHOAL_LOG_SAMPLES": "1"},
    )
    assert result["state_sha256"] == reference[CHAOS_STEPS]
    events_seen = membership(out)
    fails = [e for e in events_seen if e["event"] == "fail"]
    recovers = [e for e in events_seen if e["event"] == "recover"]
    assert len(fails) >= 10
    assert sum(e["lost_steps"] for e in recovers) <= len(fails)
    assert any(e["event"] == "join" for e in events_seen)

    # every step read exactly the samples of the uninterrupted stream: none skipped or repeated
    per_step = {}
    for log in (out / "samples").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            seen = per_step.setdefault(rec["step"], {})
            # a micro-batch recomputed after a failure read the same samples
            assert seen.setdefault(rec["micro_batch"], rec["ids"]) == rec["ids"]
    assert sorted(per_step) == list(range(CHAOS_STEPS))
    assert all(sorted(per_step[s]) == list(range(8)) for s in per_step)
    stream = [i for s in range(CHAOS_STEPS) for j in range(8) for i in per_step[s][j]]
    size = 1797
    for epoch_start in range(0, len(stream) - size + 1, size):
        assert sorted(stream[epoch_start : epoch_start + size]) == list(range(size))


def test_graceful_notice_loses_nothing(reference, tmp_path):
    out = tmp_path / "notice"
    result = shoal_run(
        out, "v100,k80,k80", STEPS, *HEAVY, "--events", "step 8: notice 1 30s; step 16: add k80"
    )
    assert result["state_sha256"] == reference[STEPS]
    events = membership(out)
    leave = next(e for e in events if e["event"] == "leave")
    after = [e for e in events if e["event"] == "recover" and e["step"] >= leave["step"]]
    assert leave["worker"] == "w1" and after and after[0]["lost_steps"] == 0


def test_all_workers_killed_then_resume(reference, tmp_path):
    out = tmp_path / "resume"
    err = shoal_run(
        out,
        "v100,k80",
        STEPS,
        *HEAVY,
        "--checkpoint-every",
        "5",
        "--events",
        "step 23: kill 0; step 23: kill 1",
        env=PACED,
        expect=1,
    )
    last = err.strip().splitlines()[-1]
    assert last.startswith("shoal: run failed:") and "--resume" in last
    assert "Traceback" not in err
    assert list((out / "checkpoints").glob("ckpt-*.json"))
    result = shoal_run(out, "k80,v100", STEPS, *HEAVY, "--resume", str(out))
    assert result["state_sha256"] == reference[STEPS]
    # a fresh run must not silently reuse (or clobber) that directory
    err = shoal_run(out, "v100", STEPS, *HEAVY, expect=2)
    assert "already holds checkpoints" in err


@pytest.mark.slow
def test_restart_after_every_holder_died_is_a_recovery_over_the_runs_clock(tmp_path):
    """A lone worker is killed while the one added before it still starts: the newcomer
    restarts from scratch. That was logged as nothing (no recover line, the steps redone
    nowhere), and result.json's wall time and samples/s covered only the newcomer's life."""
    out = tmp_path / "restart"
    events = "step 1: add k80; step 2: kill 0"  # the k80 needs seconds to start: w0 dies alone
    result = shoal_run(
        out, "v100", STEPS, "--events", events, env={"SHOAL_EMULATED_HOST_S": "0.02"}
    )
    records = metrics(out)
    recover = next(i for i, r in enumerate(records) if r.get("event") == "recover")
    before = [r for r in records[:recover] if r["kind"] == "step"]  # w0's, never logged again
    line = records[recover]
    assert line["worker"] == "w1" and "a fresh start" in line["detail"], line
    assert line["step"] == 0 and line["lost_steps"] == len(before) + 1  # and the one in flight
    assert line["recovery_time_s"] > 0
    steps = [r for r in records if r["kind"] == "step"]
    assert sorted(r["step"] for r in steps) == list(range(STEPS))
    # the whole run, on the step lines' clock: the newcomer joined seconds after the start
    assert result["wall_time_s"] >= max(r["wall_time_s"] for r in steps)
    samples = sum(r["global_batch_size"] for r in steps)
    assert result["samples_per_s"] == pytest.approx(samples / result["wall_time_s"])


def kill_tree(pid):
    """SIGKILL a process and all its descendants (torchrun starts workers in new sessions)."""
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # the parent pid
            kill_tree(int(stat.parent.name))
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow  # ~23 s; torchrun's rendezvous stays in make test (test_exact_layouts)
def test_torchrun_agent_lost_mid_run(reference, tmp_path):
    """Two torchrun agents (`--nnodes=1:2`); one host is lost (agent and worker SIGKILLed).
    The survivor's worker spools its state, torchrun restarts it alone, and it finishes."""
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=shoal-test",
           "--max-restarts=3",
           "--rdzv-conf=last_call_timeout=2,join_timeout=120,keep_alive_interval=1,keep_alive_max_attempt=3",
           "-m", "shoal.worker", DIGITS, "--steps", str(CHAOS_STEPS), "--out", str(tmp_path),
           *HEAVY]  # fmt: skip
    # paced 2x so that the host is lost mid-run, not after the last step
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "SHOAL_SLOWDOWN": "2",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }  # see docs/elastic.md
    logs = [open(tmp_path / f"agent{i}.log", "w") for i in range(2)]
    first = subprocess.Popen(
        cmd, stdout=logs[0], stderr=subprocess.STDOUT, env=env, start_new_session=True
    )  # hosts the rendezvous store
    time.sleep(2)
    second = subprocess.Popen(
        cmd, stdout=logs[1], stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if (tmp_path / "metrics.jsonl").exists() and len(metrics(tmp_path)) >= 5:
                break
            assert first.poll() is None and second.poll() is None
            time.sleep(0.2)
        rows = metrics(tmp_path)
        assert len({w["id"] for w in rows[-1]["workers"]}) == 2  # both agents were training
        kill_tree(second.pid)  # the whole host: the agent and its worker
        assert first.wait(timeout=300) == 0, (tmp_path / "agent0.log").read_text()[-3000:]
    finally:
        for p in (first, second):
            kill_tree(p.pid)
        for f in logs:
            f.close()
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["final_step"] == CHAOS_STEPS
    assert result["state_sha256"] == reference[CHAOS_STEPS]
    assert len(metrics(tmp_path)[-1]["workers"]) == 1  # finished on the surviving host
