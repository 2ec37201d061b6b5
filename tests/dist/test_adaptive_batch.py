"""Adaptive global batch sizes decide the same trajectory, and train the same bits, on any layout.

Each policy's decisions are pure functions of exact statistics and a reference placement's
priors, so one worker, three mixed workers, a run with a kill and a join, and a run resumed
from a checkpoint after every worker died must log the same per-step batch, noise scale,
similarity and learning-rate factor, and end on the same state digest.
"""

import json

import pytest

from shoal_testing import metrics, shoal_run

pytestmark = pytest.mark.dist
STEPS = 50
# M = 8 micro-batches of 16 to start; the policy decides every 10 steps within 32..256
ADAPTIVE = [
    "-o", "micro_batch_size=16", "-o", "global_batch_size=128",
    "--batch-every", "10", "--batch-bounds", "32:256", "--batch-reference", "v100,k80,k80",
    "--lr-scaling", "sqrt",
]  # fmt: skip


def trajectory(out):
    """Per step: (step, global batch, noise scale, similarity, LR factor), in step order."""
    keys = ("step", "global_batch_size", "noise_scale", "similarity", "lr_factor")
    lines = [r for r in metrics(out) if r["kind"] == "step"]
    return sorted(tuple(r.get(k) for k in keys) for r in lines)


def run(out, workers, policy, *extra, **kwargs):
    return shoal_run(out, workers, STEPS, *ADAPTIVE, "--batch-policy", policy, *extra, **kwargs)


@pytest.fixture(scope="module", params=["jabas", "pollux"])
def reference(request, tmp_path_factory):
    """One uninterrupted worker: the digest and trajectory every other layout must reproduce."""
    out = tmp_path_factory.mktemp(f"ref-{request.param}")
    digest = run(out, "v100", request.param)["state_sha256"]
    path = trajectory(out)
    batches = [p[1] for p in path]
    assert [p[0] for p in path] == list(range(STEPS))
    assert len(set(batches)) > 1, f"{request.param} never changed the batch: {batches}"
    assert all(p[4] is not None for p in path) and any(p[3] is not None for p in path)
    return request.param, digest, path


def test_mixed_workers_with_a_kill_and_a_join(reference, tmp_path):
    policy, digest, path = reference
    out = tmp_path / "churn"
    events = "step 0: add k80; step 35: kill 1"
    # the newcomer starts with the others and is admitted within a few steps; pacing (10 ms a
    # micro-batch on the fastest kind) leaves it time on a loaded host
    env = {"SHOAL_LOG_SAMPLES": "1", "SHOAL_EMULATED_HOST_S": "0.01"}
    result = run(out, "v100,k80,k80", policy, "--events", events, env=env)
    assert result["state_sha256"] == digest
    # every logged step as in the reference; rank 0 may not log the step a kill interrupts when
    # another member finished it and the regrouped group continues from that member's state
    logged = trajectory(out)
    assert set(logged) <= set(path) and len(path) - len(logged) <= 1
    kinds = [r["event"] for r in metrics(out) if r["kind"] == "membership"]
    assert "fail" in kinds and "join" in kinds

    # each step read the stream's next B samples: none skipped or read twice as B changes
    per_step = {}
    for log in (out / "samples").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            per_step.setdefault(rec["step"], {})[rec["micro_batch"]] = rec["ids"]
    stream = []
    for step, batch in zip(range(STEPS), [p[1] for p in path], strict=True):
        assert sorted(per_step[step]) == list(range(batch // 16))
        stream += [i for j in range(batch // 16) for i in per_step[step][j]]
    size = 1797  # the digits dataset: every epoch is one permutation
    assert len(stream) > size
    assert sorted(stream[:size]) == list(range(size))
    assert len(set(stream[size : 2 * size])) == len(stream[size : 2 * size])


def test_resume_after_every_worker_died(reference, tmp_path):
    policy, digest, path = reference
    if policy != "jabas":
        pytest.skip("one policy through --resume keeps the suite short; the state is generic")
    out = tmp_path / "resume"
    events = "step 23: kill 0; step 23: kill 1"
    # the kills must land before the 50th step ends: paced (10 ms a micro-batch on the fastest
    # kind, as above), steps 23 to 50 take seconds, not 0.5 s
    env = {"SHOAL_EMULATED_HOST_S": "0.01"}
    run(out, "v100,k80", policy, "--checkpoint-every", "5", "--events", events, env=env, expect=1)
    # the policy and its knobs are in the job's fingerprint: a resume with other knobs went on
    # silently, to a result no uninterrupted run gives
    other = ("--resume", str(out), "--batch-option", "gamma=0.2")
    err = run(out, "k80,v100", policy, *other, expect=2).strip().splitlines()
    assert "belongs to a different job" in err[-1] and "batch settings" in err[-1], err
    result = run(out, "k80,v100", policy, "--resume", str(out))
    assert result["state_sha256"] == digest
    assert trajectory(out) == path
