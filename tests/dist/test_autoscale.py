"""Servers bought from the emulated provider (`--provider local`): revocations, replacements and
the scaler's joins and leaves leave the trained state bitwise unchanged, and the cost ledger is
the sum of its lease lines.

The revocations come from a spot trace of two lifetimes per kind (one short, one beyond the run);
which server draws which is seeded, so `seed_for` picks a provider seed that revokes exactly the
servers a test wants, from the provider itself (the draws belong to it, not to this file).
"""

import json
import re

import pytest

from shoal_testing import DIGITS_30, metrics, shoal_run

pytestmark = pytest.mark.dist
# p100s and k80s paced against a v100 of 0.08 s per micro-batch (a v100 would run at the host's
# own speed): 30 steps outlast a replacement's process start-up, so it joins
SLOW_HOST = {"SHOAL_EMULATED_HOST_S": "0.08"}


def seed_for(trace, requests, short, **cfg):
    """A provider seed under which the spot leases of `requests` (kind, tier, t) whose index is
    in `short` are revoked within 100 s and every other spot lease outlives the run."""
    from shoal.cluster.provider import provider_from_config
    from shoal.config import ProviderConfig

    cfg.setdefault("kinds", ",".join(sorted({kind for kind, _, _ in requests})))
    for seed in range(500):
        provider = provider_from_config(
            ProviderConfig(name="local", spot_trace=str(trace), seed=seed, **cfg)
        )
        leases = [provider.request(k, t, at) for k, t, at in requests]
        spot = [(i, x) for i, x in enumerate(leases) if x.tier == "spot"]
        if all((x.revoke_at_s < 100) == (i in short) for i, x in spot):
            return seed
    pytest.skip("no provider seed gives the wanted revocations")


def leases(out):
    return [r for r in metrics(out) if r["kind"] == "lease"]


def recompute_usd(lines):
    """The ledger, again: per-second billing from each lease's open line to its close line."""
    opened = {x["server"]: x for x in lines if x["action"] == "open"}
    total = 0.0
    for x in (x for x in lines if x["action"] == "close"):
        start = opened[x["server"]]
        total += start["usd_per_hour"] * (x["t_s"] - start["t_s"]) / 3600.0
    return total


def test_revocation_with_notice_same_state_ledger_and_report(tmp_path):
    """The default suite's one run: a spot k80 revoked with a notice leaves at a step boundary
    while there is no capacity to replace it (so no second process start is waited for); the
    state is the fixed run's, the ledger is its lease lines, the report draws the cost."""
    # The k80's lease: ready at 5 s, revoked 5 s later (emulated; 5x faster in wall time),
    # with a notice 8 s before: notice at 0.4 s of wall time after the group forms, deadline
    # 1.6 s later, while the run lasts about 4 s. The worker must leave at a step boundary
    # (two 0.13 s steps and its exit: 0.2-0.3 s here) before the deadline kills it, which
    # would log a failure; with `k80,2` and a 3 s notice the deadline was 0.6 s.
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,5\n")
    out = tmp_path / "run"
    flags = ["--provider", "local", "--kinds", "v100,p100,k80", "--spot-trace", str(trace),
             "--time-scale", "5", "--startup", "5", "--notice", "8",
             "--outage", "k80:spot:1-1e9"]  # fmt: skip
    result = shoal_run(out, "p100,k80:spot", 30, *flags, env={"SHOAL_EMULATED_HOST_S": "0.03"})
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    assert [(x["server"], x["action"], x.get("cause")) for x in lines] == [
        (lines[0]["server"], "open", None),
        (lines[1]["server"], "open", None),
        (lines[1]["server"], "close", "revoked"),
        (lines[0]["server"], "close", "end"),
    ]
    assert lines[1]["device"] == "k80" and lines[1]["tier"] == "spot"
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    assert [e["event"] for e in events if e["worker"] == "w1"] == ["notice", "leave"]
    assert result["cost"]["revocations"] == 1
    assert result["cost"]["usd"] == pytest.approx(recompute_usd(lines), rel=1e-9)
    by_tier = result["cost"]["by_tier"]
    assert sum(by_tier.values()) == pytest.approx(result["cost"]["usd"], rel=1e-9)
    assert json.loads((out / "scenario.json").read_text())["steps"] == 30

    from shoal.report import write_report

    page = write_report(out).read_text()
    assert (out / "report" / "cost.png").stat().st_size > 1000
    assert "cost (servers)" in page and 'id="cost"' in page


@pytest.mark.slow
def test_revoked_spot_server_is_replaced_same_state_and_ledger(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,2\nk80,100000\n")
    cfg = dict(kinds="v100,p100,k80", startup_s=5.0, notice="3")
    # the replacement is requested at the notice (4 s), while the revoked k80 (gone at 7 s)
    # still holds its slot: it takes the next one (a lifetime is drawn per kind, tier, slot)
    seed = seed_for(
        trace, [("p100", "on_demand", 0), ("k80", "spot", 0), ("k80", "spot", 4)], {1}, **cfg
    )
    out = tmp_path / "run"
    flags = ["--provider", "local", "--kinds", "v100,p100,k80", "--spot-trace", str(trace),
             "--provider-seed", str(seed), "--time-scale", "5", "--startup", "5",
             "--notice", "3"]  # fmt: skip
    result = shoal_run(out, "p100,k80:spot", 30, *flags, env=SLOW_HOST)
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    revoked = [x for x in lines if x["action"] == "close" and x["cause"] == "revoked"]
    assert [x["device"] for x in revoked] == ["k80"]
    assert result["cost"]["revocations"] == 1
    opened = [x for x in lines if x["action"] == "open"]
    assert [(x["device"], x["tier"]) for x in opened][-1] == ("k80", "spot")  # the replacement
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    assert any(e["event"] == "notice" for e in events)
    assert any(e["event"] == "join" for e in events)  # the replacement trained
    assert result["cost"]["usd"] == pytest.approx(recompute_usd(lines), rel=1e-9)
    by_kind = result["cost"]["by_kind"]
    assert sum(by_kind.values()) == pytest.approx(result["cost"]["usd"], rel=1e-9)
    assert json.loads((out / "scenario.json").read_text())["host_s"] > 0


@pytest.mark.slow
def test_scaler_joins_and_leaves_revocation_without_notice(tmp_path):
    """Autoscaling: the scaler's mix is executed as joins and graceful leaves while a spot
    server is revoked with no notice (killed: at most the in-flight step is lost)."""
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,2\nk80,100000\np100,100000\nv100,100000\n")
    seed = seed_for(trace, [("p100", "on_demand", 0), ("k80", "spot", 0)], {1}, startup_s=5.0)
    out = tmp_path / "run"
    flags = ["--provider", "local", "--autoscale", "--deadline", "1h", "--kinds",
             "v100,p100,k80", "--spot-trace", str(trace), "--provider-seed", str(seed),
             "--time-scale", "5", "--startup", "5", "--notice", "none"]  # fmt: skip
    result = shoal_run(out, "p100,k80:spot", 30, *flags, env=SLOW_HOST)
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    assert any(x["cause"] == "revoked" for x in lines if x["action"] == "close")
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    fails = [e for e in events if e["event"] == "fail"]
    assert fails and all("SIGKILL" in e["detail"] for e in fails)
    assert sum(e.get("lost_steps", 0) for e in events if e["event"] == "recover") <= len(fails)
    assert any(r["kind"] == "cost" and r.get("projected_finish_s") for r in metrics(out))
    assert result["cost"]["usd"] == pytest.approx(recompute_usd(lines), rel=1e-9)


@pytest.mark.slow
def test_out_of_capacity_falls_back_to_what_is_offered(tmp_path):
    """No p100 spot capacity for the whole run: the scaler's requests for it fail and it
    decides again with what is offered; nothing of that kind and tier is ever leased."""
    out = tmp_path / "run"
    flags = ["--provider", "local", "--autoscale", "--deadline", "1h", "--kinds", "v100,p100,k80",
             "--outage", "p100:spot:0-1e9", "--time-scale", "5", "--startup", "5"]  # fmt: skip
    result = shoal_run(out, "p100", 30, *flags, env=SLOW_HOST)
    assert result["state_sha256"] == DIGITS_30
    opened = [(x["device"], x["tier"]) for x in leases(out) if x["action"] == "open"]
    assert ("p100", "spot") not in opened
    assert len(set(opened)) > 1  # it fell back to another kind or tier


@pytest.mark.slow
def test_every_spot_server_revoked_at_once_resumes_from_checkpoint(tmp_path):
    """Both spot servers revoked with no notice while there is no capacity: the run waits,
    requesting again each poll, and continues from the durable checkpoint when capacity
    returns, in the same `shoal run`."""
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,7\nk80,100000\n")  # revoked some steps after a checkpoint
    requests = [("k80", "spot", 0), ("k80", "spot", 0), ("k80", "spot", 30), ("k80", "spot", 30)]
    seed = seed_for(trace, requests, {0, 1}, startup_s=5.0)
    out = tmp_path / "run"
    flags = ["--provider", "local", "--kinds", "v100,k80", "--spot-trace", str(trace),
             "--provider-seed", str(seed), "--time-scale", "5", "--startup", "5",
             "--notice", "none", "--outage", "k80:spot:5-30",
             "--checkpoint-every", "2"]  # fmt: skip
    result = shoal_run(out, "2xk80:spot", 30, *flags, env=SLOW_HOST)
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    revoked = [x for x in lines if x["action"] == "close" and x["cause"] == "revoked"]
    assert len(revoked) == 2
    later = [x for x in lines if x["action"] == "open" and x["t_s"] >= 30]
    assert len(later) == 2  # capacity back: two new servers
    steps = [r["step"] for r in metrics(out) if r["kind"] == "step"]
    assert sorted(set(steps)) == list(range(30))
    assert len(steps) - len(set(steps)) <= 2  # the steps after the last checkpoint at most
    logs = "".join(p.read_text() for p in (out / "logs" / "attempt-1").glob("w*.log"))
    resumed = re.search(r"state at step (\d+) from local", logs)  # the first new worker's
    assert resumed and int(resumed[1]) > 0  # from the checkpoint, not a fresh start


def test_restart_recovery_resumes_every_worker_from_the_checkpoint(tmp_path):
    """`--recovery restart` (SkyPilot's managed spot): the k80's revocation stops both workers
    and releases both servers; two fresh servers boot and the job goes on from the durable
    checkpoint. Same state as the fixed run, the lost steps recorded, the ledger its lines."""
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,3\nk80,100000\n")
    # the replacements are requested after the revocation (at 5 s): the new k80 takes the
    # revoked one's slot (a lifetime is drawn per kind, tier, slot and use)
    requests = [("p100", "on_demand", 0), ("k80", "spot", 0)]
    requests += [("p100", "on_demand", 10), ("k80", "spot", 10)]
    seed = seed_for(trace, requests, {1}, startup_s=2.0)
    out = tmp_path / "run"
    flags = ["--provider", "local", "--kinds", "p100,k80", "--spot-trace", str(trace),
             "--provider-seed", str(seed), "--time-scale", "5", "--startup", "2",
             "--recovery", "restart", "--checkpoint-every", "2"]  # fmt: skip
    result = shoal_run(out, "p100,k80:spot", 30, *flags, env={"SHOAL_EMULATED_HOST_S": "0.03"})
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    closes = [(x["device"], x["cause"]) for x in lines if x["action"] == "close"]
    assert closes[:2] == [("k80", "revoked"), ("p100", "released")]  # the whole job stops
    assert len([x for x in lines if x["action"] == "open"]) == 4  # and boots two new servers
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    assert not any(e["event"] == "notice" for e in events)  # a restart takes no notice
    # (a replacement whose process starts later joins the restarted group as a newcomer)
    recovers = [e for e in events if e["event"] == "recover" and "restart" in e["detail"]]
    assert len(recovers) == 1
    failed = [e["step"] for e in events if e["event"] == "fail"]  # steps done at the stop
    ckpt = recovers[0]["step"]
    assert ckpt % 2 == 0 and recovers[0]["lost_steps"] == failed[0] + 1 - ckpt
    logs = "".join(p.read_text() for p in (out / "logs" / "attempt-1").glob("w[23].log"))
    assert f"state at step {ckpt} from local" in logs  # the new workers loaded the checkpoint
    assert result["cost"]["revocations"] == 1
    assert result["cost"]["usd"] == pytest.approx(recompute_usd(lines), rel=1e-9)


@pytest.mark.slow
def test_resume_continues_the_ledger(tmp_path):
    """`--resume` of a provider run: the cost so far is carried from the first attempt's lease
    lines, the new servers are numbered after the old ones (none billed twice), the clock goes
    on from where the first attempt ended, and the state is the uninterrupted run's."""
    out = tmp_path / "run"
    flags = ["--provider", "local", "--kinds", "p100,k80", "--time-scale", "5", "--startup", "2",
             "--checkpoint-every", "10"]  # fmt: skip
    env = {"SHOAL_EMULATED_HOST_S": "0.03"}
    first = shoal_run(out, "p100,k80:spot", 20, *flags, env=env)
    before = leases(out)
    result = shoal_run(out, "p100,k80:spot", 30, *flags, "--resume", str(out), env=env)
    assert result["state_sha256"] == DIGITS_30
    lines = leases(out)
    servers = [x["server"] for x in lines if x["action"] == "open"]
    assert len(servers) == 4 == len(set(servers))  # two per attempt, each billed once
    assert sorted(x["server"] for x in lines if x["action"] == "close") == sorted(servers)
    end_first = max(x["t_s"] for x in before)
    assert all(x["t_s"] >= end_first for x in lines[len(before) :])  # the clock goes on
    assert result["cost"]["usd"] > first["cost"]["usd"]
    assert result["cost"]["usd"] == pytest.approx(recompute_usd(lines), rel=1e-9)
    assert sum(result["cost"]["by_tier"].values()) == pytest.approx(result["cost"]["usd"])
    # OUT/scenario.json is the last attempt's; each attempt's is kept in its log folder
    steps = {
        p.parent.name: json.loads(p.read_text())["steps"] for p in out.glob("logs/*/scenario.json")
    }
    assert steps == {"attempt-1": 20, "attempt-2": 30}
    assert json.loads((out / "scenario.json").read_text())["steps"] == 30


CRASHING_JOB = """
import os, pathlib
import torch
from torch import nn
import shoal

MARK = pathlib.Path(__file__).with_name("crashed")  # once it exists, every worker crashes


class Crashing(torch.utils.data.Dataset):
    reads = 0

    def __len__(self):
        return 512

    def __getitem__(self, i):
        if os.environ.get("SHOAL_WORKER_ID"):  # a worker, not the launcher's check
            Crashing.reads += 1
            if Crashing.reads > CRASH_AFTER:
                MARK.touch()
            if MARK.exists():
                os._exit(3)
        return torch.ones(4) * (i % 7), torch.tensor(i % 2)


def make_job(crash_after=0):
    global CRASH_AFTER
    CRASH_AFTER = crash_after
    return shoal.Job(
        model=lambda: nn.Linear(4, 2),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        dataset=Crashing(),
        loss_fn=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
        micro_batch_size=8,
        global_batch_size=16,
    )
"""


@pytest.mark.parametrize(
    "crash_after, extra",
    [
        (0, []),  # at their first read, before the group trains a step: hung until killed
        (
            40,
            ["--autoscale", "--budget", "5usd", "--startup", "0"],
        ),  # step ~5; each replacement at once
    ],
)
def test_workers_that_keep_crashing_fail_the_run_instead_of_buying_servers(
    tmp_path, crash_after, extra
):
    """A job that crashes is not a revocation: the run fails once its last worker is gone,
    rather than waiting on servers (before the first step) or replacing the crashed workers
    with new servers that crash in turn (the scaler, while no step is trained)."""
    job = tmp_path / "crashing.py"
    job.write_text(CRASHING_JOB)
    out = tmp_path / "run"
    err = shoal_run(
        out, "k80,k80", 200, "--provider", "local", "-o", f"crash_after={crash_after}", *extra,
        job=str(job), expect=1,
    )  # fmt: skip
    assert "every worker is gone" in err, err[-2000:]
    started = [r for r in metrics(out) if r["kind"] == "lease" and r["action"] == "open"]
    if extra:  # the scaler replaced crashed workers until 4 (2 x 2) failed at one step, no more:
        # each of the first 3 failures may buy one (2 at once when a pair crashes in one poll)
        assert "4 workers failed at step" in err and "buying no more" in err
        assert 2 < len(started) <= 2 + 3, started
    else:
        assert len(started) == 2
    closed = [r for r in leases(out) if r["action"] == "close"]
    assert len(closed) == len(started)  # every lease is closed and billed
