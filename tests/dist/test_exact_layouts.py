"""The acceptance test of the engine: the same state digest whatever the workers."""

import json
import subprocess
import sys

import pytest

from shoal_testing import DIGITS, free_port, metrics, shoal_run

pytestmark = pytest.mark.dist
STEPS = 30


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    return out, shoal_run(out, "v100", STEPS)


@pytest.mark.parametrize(
    "workers",
    ["2xv100", "v100,k80,k80", "5xv100"],  # 5 workers > M = 4 micro-batches
)
def test_digest_is_independent_of_workers(single, tmp_path, workers):
    out = tmp_path / "run"
    result = shoal_run(out, workers, STEPS)
    assert result["final_step"] == STEPS
    assert result["state_sha256"] == single[1]["state_sha256"]
    rows = metrics(out)
    assert len(rows) == STEPS
    shares = [[w["micro_batches"] for w in row["workers"]] for row in rows]
    assert all(sum(s) == 4 for s in shares)
    if workers == "5xv100":
        assert all(0 in s for s in shares)  # someone always idles
    if workers == "v100,k80,k80":  # the fast worker does most of the work
        assert sum(s[0] for s in shares) > sum(s[1] + s[2] for s in shares)
    # per-step losses are identical too, not just the end state
    assert [r["loss"] for r in rows] == [r["loss"] for r in metrics(single[0])]


def test_a_cap_moves_work_but_not_the_digest(single, tmp_path):
    """--max-micro-batches 2 holds the fast worker to DDP's equal split of M = 4."""
    out = tmp_path / "capped"
    result = shoal_run(out, "v100,k80", STEPS, "--max-micro-batches", "2")
    assert result["state_sha256"] == single[1]["state_sha256"]
    assert all([w["micro_batches"] for w in r["workers"]] == [2, 2] for r in metrics(out))


@pytest.mark.parametrize("front", ["torchrun", "shoal torchrun"])
def test_torchrun_gives_the_same_digest(single, tmp_path, front):
    """torchrun runs the job file itself, which hands over to shoal through shoal.launch;
    `shoal torchrun` runs it as `-m shoal.worker JOB.py` under the same agent. Both end with
    the done line `shoal run` prints."""
    launcher = ["torch.distributed.run"] if front == "torchrun" else ["shoal", "torchrun"]
    cmd = [
        sys.executable,
        "-m",
        *launcher,
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        DIGITS,
        "--steps",
        str(STEPS),
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["state_sha256"] == single[1]["state_sha256"]
    # rank 0 ends with shoal run's done line, once (it printed none before)
    done = [line for line in proc.stdout.splitlines() if line.startswith("done: ")]
    assert len(done) == 1 and f"{STEPS} steps in " in done[0], proc.stdout[-2000:]
    assert done[0].endswith(f"state_sha256 {result['state_sha256']}")


def test_clipping_is_inside_the_invariant(single, tmp_path):
    """Job.clip_grad_norm (the digits job's option) scales the exact mean gradient by the same
    factor on every layout; it clips here (the losses leave the unclipped run's after step 0)."""
    clipped = [
        shoal_run(tmp_path / w, w, STEPS, "-o", "clip_grad_norm=0.5") for w in ("v100", "v100,k80")
    ]
    assert clipped[0]["state_sha256"] == clipped[1]["state_sha256"] != single[1]["state_sha256"]
    rows = metrics(tmp_path / "v100,k80")
    losses, unclipped = [r["loss"] for r in rows], [r["loss"] for r in metrics(single[0])]
    assert losses[0] == unclipped[0] and all(a != b for a, b in zip(losses[2:6], unclipped[2:6]))
    # each step logs its gradient's norm before clipping, the same on both layouts
    norms = [r["grad_norm"] for r in rows]
    assert norms == [r["grad_norm"] for r in metrics(tmp_path / "v100")] and norms[0] > 0.5
    assert "grad_norm" not in metrics(single[0])[0]


HALF = ("-o", "autocast=float16", "-o", "loss_scale={'init_scale': 1e6, 'growth_interval': 3}")


def test_float16_and_its_dynamic_loss_scale_are_inside_the_invariant(single, tmp_path):
    """Under float16 autocast the loss scale starts too high (float16's backward overflows),
    backs off on the skipped steps and grows again every 3 finite ones: the same steps are
    skipped at the same scales, to the same digest, on one worker, on two, and on two that
    lose one and gain another, which must get the scale with the state: at the initial scale
    its micro-batches would overflow."""
    steps, events = 40, "step 2: add k80; step 30: kill 1"
    paced = {"SHOAL_EMULATED_HOST_S": "0.02"}  # the joiner starts before the run ends
    runs = {
        "v100": shoal_run(tmp_path / "v100", "v100", steps, *HALF),
        "v100,k80": shoal_run(tmp_path / "v100,k80", "v100,k80", steps, *HALF),
        "churn": shoal_run(
            tmp_path / "churn", "v100,k80", steps, *HALF, "--events", events, env=paced
        ),
    }
    assert len({r["state_sha256"] for r in runs.values()}) == 1
    lines = {w: metrics(tmp_path / w) for w in runs}
    assert any(r.get("event") == "join" for r in lines["churn"])
    steps_seen = [
        [(r["loss"], r["loss_scale"], r.get("skipped", False)) for r in rows if r["kind"] == "step"]
        for rows in lines.values()
    ]
    assert steps_seen[0] == steps_seen[1] == steps_seen[2]
    scales, skipped = [s for _, s, _ in steps_seen[0]], [k for _, _, k in steps_seen[0]]
    assert skipped[0] and not all(skipped[-10:])
    assert skipped.count(True) == runs["v100"]["loss_scale_backoffs"]
    assert any(b > a for a, b in zip(scales, scales[1:]))  # it grew after backing off
    assert steps_seen[0][0][0] != metrics(single[0])[0]["loss"]  # float16 computed step 0


def test_fast_mode_runs_and_tracks_exact_mode(single, tmp_path):
    shoal_run(tmp_path, "2xv100", STEPS, "--consistency", "fast")
    fast = [r["loss"] for r in metrics(tmp_path)]
    exact = [r["loss"] for r in metrics(single[0])]
    assert fast[:5] == pytest.approx(exact[:5], rel=1e-4)


def test_augmentation_draws_are_inside_the_invariant(single, tmp_path):
    """Random shifts drawn while a micro-batch is read (ahead of its step, by whichever
    worker computes it) leave the digest independent of the workers too."""
    steps, augment = 12, ("-o", "augment=True")
    one = shoal_run(tmp_path / "one", "v100", steps, *augment)
    mixed = shoal_run(tmp_path / "mixed", "v100,k80,k80", steps, *augment)
    assert mixed["state_sha256"] == one["state_sha256"]
    augmented = [r["loss"] for r in metrics(tmp_path / "one")]
    assert augmented != [r["loss"] for r in metrics(single[0])][:steps]  # the shifts took effect
