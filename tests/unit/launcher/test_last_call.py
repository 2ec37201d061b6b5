"""A group re-forming from nobody waits for the workers that are about to be ready (the
controller's last call), and a group with survivors does not."""

import types

import pytest

from shoal.config import RunConfig
from shoal.launcher import generations, supervisor
from shoal.launcher.spec import RunSpec, Speeds


@pytest.fixture
def ctl(tmp_path):
    spec = RunSpec(config=RunConfig("job.py", 10, str(tmp_path)), kinds=[])
    c = supervisor.Controller(spec, Speeds({"k80": 1.0}, {"k80": 0.1}), show_progress=False)
    c.generation, c.members = 3, ["w0"]
    for i in range(3):  # w0 was the group; w1 and w2 were started together
        w = supervisor.Worker(f"w{i}", "k80", types.SimpleNamespace(poll=lambda: None), tmp_path)
        c.workers[w.id] = w
    c.workers["w0"].state = "gone"  # every member is gone
    return c


def ready(c, wid):
    c.store.set(f"ready/{wid}", "1")
    c.store.set(f"arrived/{c.generation + 1}/{wid}", "1")


def test_a_group_from_nobody_waits_for_a_worker_still_building_its_model(ctl):
    ready(ctl, "w1")
    ctl.admit_and_regroup()
    assert ctl.members == ["w0"]  # w2 is coming: nothing published yet
    ready(ctl, "w2")
    ctl.admit_and_regroup()
    assert ctl.members == ["w1", "w2"] and ctl.generation == 4


def test_the_last_call_ends(ctl, monkeypatch):
    ready(ctl, "w1")
    ctl.admit_and_regroup()
    assert ctl.members == ["w0"]
    monkeypatch.setattr(generations, "LAST_CALL_S", 0.0)
    ctl.admit_and_regroup()
    assert ctl.members == ["w1"]  # w2 joins later, as a newcomer


@pytest.mark.parametrize("how", ["died", "declared lost"])
def test_a_worker_that_died_or_was_declared_lost_is_not_waited_for(ctl, how):
    if how == "died":
        ctl.workers["w2"].proc = types.SimpleNamespace(poll=lambda: 1)
    else:  # alive, but silent past an earlier group's deadline (a stall): it may never wake
        ctl.workers["w2"].declared_lost = True
    ready(ctl, "w1")
    ctl.admit_and_regroup()
    assert ctl.members == ["w1"]


def test_survivors_do_not_wait_for_a_joiner_still_building_its_model(ctl):
    ctl.workers["w0"].state = "member"
    ctl.store.set(f"arrived/{ctl.generation + 1}/w0", "1")
    ready(ctl, "w1")
    ctl.admit_and_regroup()
    assert ctl.members == ["w0", "w1"]
