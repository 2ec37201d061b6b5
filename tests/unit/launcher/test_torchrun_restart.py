"""A group torchrun restarted logs its membership changes and keeps the run's clock, as
`shoal run` does (issue 18: the report of a torchrun run after a host loss was empty)."""

import json
import os
import types

from shoal.metrics.files import read_metrics
from shoal.metrics.training import MembershipEvent
from shoal.runtime.continuity import continue_earlier_life, log_restart


def step_line(step, ids, wall):
    workers = [{"id": i, "rank": r, "micro_batches": 1} for r, i in enumerate(ids)]
    return {"kind": "step", "step": step, "wall_time_s": wall, "workers": workers}


def test_restart_logs_who_is_gone_and_who_joined(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOAL_T0", raising=False)
    path = tmp_path / "metrics.jsonl"
    lines = [step_line(0, ["a:1:0", "b:2:0"], 3.0), step_line(1, ["a:1:0", "b:2:0"], 4.5)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    os.utime(path, (1000.0, 1000.0))  # the earlier life's last write
    w = types.SimpleNamespace(out=tmp_path, t0=5000.0, ended_at=None, earlier_ids=None)
    continue_earlier_life(w)
    assert w.t0 == 1000.0 - 4.5  # the run's clock, not this life's
    assert w.ended_at == 1000.0 and w.earlier_ids == ("a:1:0", "b:2:0")

    w.trainer = types.SimpleNamespace(step=2)
    group = types.SimpleNamespace(ids=("a:1:0", "c:3:0"), generation=1)
    log_restart(w, group)
    events = [
        (r.event, r.worker, r.step) for r in read_metrics(path) if isinstance(r, MembershipEvent)
    ]
    assert events == [("fail", "b:2:0", 2), ("join", "c:3:0", 2)]
    assert w.earlier_ids is None  # logged once


def test_first_life_changes_nothing(tmp_path):
    w = types.SimpleNamespace(out=tmp_path, t0=5.0, ended_at=None, earlier_ids=None)
    continue_earlier_life(w)  # no metrics yet
    assert (w.t0, w.ended_at, w.earlier_ids) == (5.0, None, None)
