"""Compressed training across sites (issue 15): a kill leaves the digest of the same
micro-batch-to-site assignment unchanged, and compression does change the result; on the
slow-link bed (root only) --compress auto follows a change of the link's rate."""

import pytest
from slowlink.testbed import bed_available

from shoal_testing import ROOT, metrics, shoal_run

pytestmark = pytest.mark.dist
STEPS = 60
# `shoal run examples/digits.py --steps 60` uncompressed, on any layout (the digits invariant)
DENSE_60 = "f0cc9af9b3766eae09bb6118f16db1b7858ca5a5fb2b69b64daa58b4466e83ae"
# M = 4 micro-batches, at most 2 per worker: 3 workers split 2/1/1 and 2 workers 2/2, so
# site 0 (w0) computes micro-batches 0-1 and site 1 computes 2-3 whoever is in site 1
COMPRESSED = ["--compress", "blocktopk:0.1", "--max-micro-batches", "2", "--replan-every", "999"]
# a fixed yardstick per micro-batch (v100 0.02 s, a k80 slower), so that measured speeds, and
# the plan after a regroup, do not depend on the host's load: the v100 keeps two micro-batches
PACED = {"SHOAL_EMULATED_HOST_S": "0.02"}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Two workers, one per site, nobody joins or fails: the digest the others must give."""
    out = tmp_path_factory.mktemp("plain")
    return shoal_run(out, "v100,k80", STEPS, *COMPRESSED, "--sites", "0/1")["state_sha256"]


def test_a_kill_in_a_site_keeps_the_digest_of_the_same_site_assignment(plain, tmp_path):
    # w1 leads site 1 and dies; w2, which computed the same residuals, carries on alone
    args = [*COMPRESSED, "--sites", "0/1,2", "--events", "step 8: kill 1"]
    killed = shoal_run(tmp_path / "killed", "v100,k80,k80", STEPS, *args, env=PACED)
    assert killed["state_sha256"] == plain
    assert plain != DENSE_60  # compression changed what was applied


@pytest.mark.slow
def test_a_joiner_gets_its_sites_residuals_and_can_lead_the_site(plain, tmp_path):
    """w2 joins site 1 (named by --sites, not started), receives site 1's residuals from w1
    (`SiteExchange.share`), then w1 is killed and w2 leads the site: the digest is still that
    of the uninterrupted two-worker run. Without the hand-over w2 would lead from zero
    residuals and the digest would differ (checked by hand: 58d29a4b... against 92cb496f...)."""
    events = "step 1: add k80; step 55: kill 1"
    args = [*COMPRESSED, "--sites", "0/1,2", "--events", events]
    joined = shoal_run(tmp_path / "joined", "v100,k80", STEPS, *args, env=PACED)
    seen = [(r["event"], r["step"]) for r in metrics(tmp_path / "joined") if r["kind"] != "step"]
    join_step = next(step for event, step in seen if event == "join")
    kill_step = next(step for event, step in seen if event == "fail")
    if join_step >= kill_step:
        pytest.skip(f"the joiner arrived at step {join_step}, after the kill (a loaded host)")
    assert joined["state_sha256"] == plain


PIPE_STEPS = 30
PIPELINED = [*COMPRESSED, "--pipeline"]
# the uninterrupted two-worker run (one worker per site) of PIPELINED, and the same without
# --pipeline (both with the default lazy optimizer step): what the kill below must replay,
# and what pipelining must change
PIPELINED_30 = "17a4a5d99c4f1ca92844f854430782376370a952f129e9d5f3aa59fc5ed82f9a"
COMPRESSED_30 = "ecc0a3f6aea44c1b32d960766e69d8dd7ffdc5189bcc2f53d2006fab1c750739"


def test_a_pipelined_run_replays_its_digest_through_a_kill(tmp_path):
    """--pipeline: w1 dies at step 8 with its site's packets of step 7 in flight; the new group
    gathers them again synchronously (w2 holds the same packets) and the digest is that of
    the uninterrupted two-worker pipelined run (checked by the slow test below)."""
    args = [*PIPELINED, "--sites", "0/1,2", "--events", "step 8: kill 1"]
    killed = shoal_run(tmp_path / "killed", "v100,k80,k80", PIPE_STEPS, *args, env=PACED)
    assert killed["state_sha256"] == PIPELINED_30


@pytest.mark.slow
def test_the_pipelined_digests_are_those_of_the_two_worker_runs(tmp_path):
    two = ["v100,k80", PIPE_STEPS, *COMPRESSED, "--sites", "0/1"]
    piped = shoal_run(tmp_path / "pipe", *two, "--pipeline")["state_sha256"]
    plain = shoal_run(tmp_path / "plain", *two)["state_sha256"]
    assert piped != plain  # pipelining changes what is applied (the stale gradient)
    assert (piped, plain) == (PIPELINED_30, COMPRESSED_30)


@pytest.mark.slow
def test_a_pipelined_joiner_gets_its_sites_pending_messages(tmp_path):
    """As the joiner test above, with --pipeline: w2 receives site 1's residuals and its
    messages not yet applied, then leads the site after w1's kill (seen by hand: join at step
    22, kill at 25, the uninterrupted run's digest)."""
    args = [*PIPELINED, "--sites", "0/1,2", "--events", "step 1: add k80; step 25: kill 1"]
    joined = shoal_run(tmp_path / "joined", "v100,k80", PIPE_STEPS, *args, env=PACED)
    seen = [(r["event"], r["step"]) for r in metrics(tmp_path / "joined") if r["kind"] != "step"]
    join_step = next(step for event, step in seen if event == "join")
    if join_step >= 25:
        pytest.skip(f"the joiner arrived at step {join_step}, after the kill (a loaded host)")
    assert joined["state_sha256"] == PIPELINED_30


def train_on_bed(out, rates_mbit, steps_per_rate, dim=128, batch=128):
    """The transformer example (dim `dim`, global batch `batch`: 8 micro-batches, so the
    compute a dense exchange at 1 Gbit/s hides under) trained with --compress auto by two
    torchrun workers in two sites of the slow-link bed; the link's rate moves to the next of
    `rates_mbit` after the steps of `steps_per_rate` (read from the run's metrics while it
    trains). Returns the step lines and the first step run at each rate."""
    import json
    import os
    import subprocess
    import time

    from slowlink.testbed import WAN, SlowLinkBed

    src = str(ROOT / "src")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": WAN, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
    steps = sum(steps_per_rate)
    job = ["-m", "shoal.worker", str(ROOT / "examples" / "transformer.py"), "--steps", str(steps)]
    job += ["--out", str(out), "--compress", "auto", "-o", f"dim={dim}"]
    job += ["-o", f"global_batch_size={batch}"]
    metrics, changed_at = out / "metrics.jsonl", [0]
    with SlowLinkBed(2, rates_mbit[0]) as bed:
        procs = [
            subprocess.Popen(bed.torchrun_argv(site, job), env=env, stdout=subprocess.DEVNULL,
                             stderr=open(out.parent / f"site{site}.log", "w"))
            for site in range(2)
        ]  # fmt: skip
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            done = metrics.read_text().count('"kind": "step"') if metrics.exists() else 0
            n = len(changed_at)
            if n < len(rates_mbit) and done >= sum(steps_per_rate[:n]):
                bed.set_rate(rates_mbit[n])
                changed_at.append(done)  # the next step to start runs at the new rate
            time.sleep(0.05)
        for p in procs:
            p.kill() if p.poll() is None else None
            p.wait()
        assert all(p.returncode == 0 for p in procs), (out.parent / "site0.log").read_text()
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [r for r in lines if r["kind"] == "step"], changed_at


@pytest.mark.skipif(bed_available() is not None, reason=bed_available() or "")
def test_auto_keep_ratio_follows_the_link_rate(tmp_path):
    """1 Gbit/s -> 100 Mbit/s -> 500 Mbit/s: the controller lowers the keep ratio within a
    few steps of the fall and raises it again after the rise. Relative to each phase: on an
    unloaded host the dense exchange hides at 1 Gbit/s and the ratio climbs back to dense at
    500 Mbit/s (docs/notes/slow-links.md), but on a loaded one gloo's CPU time makes small
    exchanges look slow, so the ratio may leave dense early or dip before it climbs."""
    out = tmp_path / "run"
    out.mkdir()
    # 20 steps at 500 Mbit/s: a move up waits 3 steps, twice or 4x that after moves undone in
    # the slow phase (docs/notes/slow-links.md); 12 steps missed the rise in 2 runs of 50
    steps, changed_at = train_on_bed(out, [1000.0, 100.0, 500.0], steps_per_rate=(8, 8, 20))
    keep = {s["step"]: s["keep_ratio"] for s in steps}
    assert len(changed_at) == 3 and len(keep) == 36
    slow, fast = changed_at[1], range(changed_at[2], 36)
    assert min(keep[t] for t in range(slow, slow + 3)) < keep[slow - 1]  # followed the fall
    assert max(keep[t] for t in fast[-6:]) > min(keep[t] for t in fast)  # and the rise
