"""A group that takes its state from nobody after every holder of it was lost logs a recovery:
the time since the controller's line for the last holder gone, and the steps done again."""

import json
import types

import pytest

from shoal.runtime.continuity import restart_after_loss


def worker(
    tmp_path, lines, logged, step=20, restored="the checkpoint of step 20", recovery="peers"
):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return types.SimpleNamespace(
        restored=restored,
        t0=100.0,
        trainer=types.SimpleNamespace(step=step),
        writer=types.SimpleNamespace(path=path, logged=logged),
        config=types.SimpleNamespace(provider=types.SimpleNamespace(recovery=recovery)),
    )


def gone(event, wall):
    return {"kind": "membership", "event": event, "worker": "w0", "step": 25, "wall_time_s": wall}


def group(generation=1):
    return types.SimpleNamespace(generation=generation, ids=("w1",), kinds=("k80",))


@pytest.mark.parametrize("event, in_flight", [("fail", 1), ("leave", 0)])
def test_the_steps_since_the_state_are_lost_and_a_failures_step_in_flight(
    tmp_path, event, in_flight
):
    lines = [gone("fail", 1.0), {"kind": "step", "step": 24}, gone(event, 7.5)]
    ended_at, lost, source, step = restart_after_loss(worker(tmp_path, lines, 24), group())
    assert ended_at == 107.5  # the last holder's line, on the run's clock
    assert lost == 25 - 20 + in_flight and step == 20
    assert source == "the checkpoint of step 20: every holder of the state was lost"


def test_no_recovery_at_the_attempts_start_from_a_peer_or_for_the_restart_strategy(tmp_path):
    lines = [gone("fail", 7.5)]
    assert restart_after_loss(worker(tmp_path, lines, 24), group(generation=0)) is None
    assert restart_after_loss(worker(tmp_path, lines, 24, restored=None), group()) is None
    # --recovery restart: the controller logs the restarts it makes (launcher/restart.py)
    w = worker(tmp_path, lines, 24, recovery="restart")
    assert restart_after_loss(w, group()) is None
    assert restart_after_loss(worker(tmp_path, [], -1), group()) is None  # nothing was lost
