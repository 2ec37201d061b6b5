"""The torchrun membership: one generation per process life; a group that ends early spools."""

import os
import socket

from shoal.runtime.membership import Group, TorchrunMembership


def test_torchrun_membership_is_one_life(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    m = TorchrunMembership("gloo")
    # the id outlives restarts (ranks are renumbered): host, agent pid, local rank
    assert m.restarted and m.may_hold_state
    assert m.worker_id == f"{socket.gethostname()}:{os.getppid()}:0"
    assert m.join() == Group(2, 0, 1, (m.worker_id,), ("native",), (1.0,))
    assert m.join() is None  # the next generation is the agent's restart, not this process
    assert m.regroup_requested() is False


def test_torchrun_membership_spools_and_exits_when_lost(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    m = TorchrunMembership("gloo")
    assert not m.restarted and not m.may_hold_state
    spooled = []
    assert m.on_lost(lambda: spooled.append(True), 143) == 143 and spooled == [True]


def test_store_regroup_request_is_a_flag_the_watcher_raises():
    import time

    from shoal.runtime.membership import StoreMembership, host_store

    store, port, _sock = host_store()
    m = StoreMembership("w0", "127.0.0.1", port, "gloo")
    assert m.regroup_requested() is False
    store.set("regroup/0", "1")
    deadline = time.monotonic() + 5
    while not m.regroup_requested() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert m.regroup_requested()
    assert m.on_lost(lambda: None, 1) is None  # the controller forms the next generation
    m.leave_generation()  # generation 1 has not been asked
    assert m.generation == 1 and m.regroup_requested() is False
