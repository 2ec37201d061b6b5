"""The node-local spool a stopping torchrun worker leaves for its successor: one per worker slot
of one agent, and an earlier run's or a dead agent's is cleared at a fresh start."""

import os
import pathlib
import subprocess
import sys

from shoal.runtime.outputs import clear_spool, spool_dir


def spool_of_a_child(out: pathlib.Path, local_rank: str) -> str:
    """spool_dir as a worker started by another agent (this test's child process) sees it."""
    code = "import pathlib, sys; from shoal.runtime.outputs import spool_dir; "
    code += "print(spool_dir(pathlib.Path(sys.argv[1])))"
    env = {**os.environ, "LOCAL_RANK": local_rank}
    return subprocess.run(
        [sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_two_agents_on_one_host_never_share_a_spool(tmp_path, monkeypatch):
    # keyed by the local rank alone, the two agents' rank-0 workers of one run (two sites of
    # the slow-link bed) wrote one file, and one failed on the other's rename
    monkeypatch.setenv("LOCAL_RANK", "0")
    mine = spool_dir(tmp_path)
    assert mine == spool_dir(tmp_path)  # a restarted worker of this agent finds it again
    assert spool_of_a_child(tmp_path, "0") != mine  # another agent's rank 0
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert spool_dir(tmp_path) != mine
    assert pathlib.Path(mine).parent == pathlib.Path(spool_dir(tmp_path)).parent  # one run


def test_a_fresh_start_clears_its_own_and_dead_agents_spools_only(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    mine = pathlib.Path(spool_dir(tmp_path))
    root = mine.parent
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no live process (reused within a test: not in practice)
    live = root / f"{os.getpid()}-1"  # a live agent's other worker slot
    for d in (mine, live, root / f"{dead.pid}-0", root / "0"):  # "0": the old layout
        d.mkdir(parents=True, exist_ok=True)
        (d / "ckpt-000000003.pt").write_bytes(b"state")
    clear_spool(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == [live.name]
    clear_spool(tmp_path / "another run")  # nothing there: nothing to do
