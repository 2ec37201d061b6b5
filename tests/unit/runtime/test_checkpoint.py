import pytest
import torch

from shoal.errors import UserError
from shoal.runtime.checkpoint import AsyncCheckpointer, Checkpointer, load_latest, save_checkpoint

FP = "f" * 64


def state(step):
    return {"step": step, "w": torch.full((3,), float(step)), "opt": {"lr": 0.1}}


def test_round_trip_and_newest_wins(tmp_path):
    save_checkpoint(str(tmp_path), 5, state(5), FP)
    save_checkpoint(str(tmp_path), 10, state(10), FP)
    step, got = load_latest(str(tmp_path), FP)
    assert step == 10 and torch.equal(got["w"], torch.full((3,), 10.0))


def test_keeps_only_the_newest(tmp_path):
    for s in range(5):
        save_checkpoint(str(tmp_path), s, state(s), FP, keep=2)
    # a checkpoint is its manifest and its payload: both of the older ones are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000003.json",
        "ckpt-000000003.pt",
        "ckpt-000000004.json",
        "ckpt-000000004.pt",
    ]


def test_what_a_killed_writer_left_goes_with_the_next_checkpoint(tmp_path):
    """A launcher SIGKILLed mid-checkpoint leaves a .pt.tmp, or a .pt before its manifest; a
    resume skips them, and they stayed on the disk for good, a checkpoint's size each."""
    save_checkpoint(str(tmp_path), 2, state(2), FP, keep=0)
    (tmp_path / "ckpt-000000003.pt.tmp").write_bytes(b"half")
    (tmp_path / "ckpt-000000004.pt").write_bytes(b"no manifest")
    (tmp_path / "ckpt-000000004.json.tmp").write_bytes(b"{")
    (tmp_path / "ckpt-000000009.pt.tmp").write_bytes(b"a later step's: not yet")
    save_checkpoint(str(tmp_path), 5, state(5), FP, keep=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000002.json",
        "ckpt-000000002.pt",
        "ckpt-000000005.json",
        "ckpt-000000005.pt",
        "ckpt-000000009.pt.tmp",
    ]


def test_a_truncated_checkpoint_does_not_count_toward_keep(tmp_path):
    """A resume skipped the truncated step 20 and loaded 15; the next save keeps 3 whole
    ones (10, 15, 30) and leaves the broken 20 beside them, not deleting the good 10."""
    for s in (5, 10, 15, 20):
        save_checkpoint(str(tmp_path), s, state(s), FP, keep=3)
    broken = tmp_path / "ckpt-000000020.pt"
    broken.write_bytes(broken.read_bytes()[:100])
    save_checkpoint(str(tmp_path), 30, state(30), FP, keep=3)
    assert sorted(int(p.stem[5:]) for p in tmp_path.glob("*.pt")) == [10, 15, 20, 30]
    for s in (35, 40):  # then 20 is older than the oldest kept (30): removed
        save_checkpoint(str(tmp_path), s, state(s), FP, keep=3)
    assert sorted(int(p.stem[5:]) for p in tmp_path.glob("*.pt")) == [30, 35, 40]


def test_keep_zero_keeps_every_checkpoint(tmp_path):
    for s in range(5):
        save_checkpoint(str(tmp_path), s, state(s), FP, keep=0)
    assert len(list(tmp_path.glob("*.json"))) == 5


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_checkpoint_is_skipped_with_a_warning(tmp_path, damage):
    save_checkpoint(str(tmp_path), 5, state(5), FP)
    save_checkpoint(str(tmp_path), 10, state(10), FP)
    pt = tmp_path / "ckpt-000000010.pt"
    data = pt.read_bytes()
    pt.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-9] + b"X" + data[-8:])
    with pytest.warns(UserWarning, match="checksum mismatch") as record:
        step, _ = load_latest(str(tmp_path), FP)
    assert step == 5 and len(record) == 1 and "\n" not in str(record[0].message)


@pytest.mark.parametrize("fingerprint", ["missing", None, 7, ["f"]])
def test_a_manifest_without_a_fingerprint_is_skipped_not_taken_for_another_job(
    tmp_path, fingerprint
):
    """It was refused as "a different job (fingerprint None ...)": the whole resume failed,
    though the checkpoint before it was whole and this job's."""
    import json

    save_checkpoint(str(tmp_path), 5, state(5), FP)
    save_checkpoint(str(tmp_path), 10, state(10), FP)
    manifest = tmp_path / "ckpt-000000010.json"
    fields = json.loads(manifest.read_text())
    if fingerprint == "missing":
        del fields["fingerprint"]
    else:
        fields["fingerprint"] = fingerprint
    manifest.write_text(json.dumps(fields))
    with pytest.warns(UserWarning, match="its manifest has no job fingerprint") as record:
        step, _ = load_latest(str(tmp_path), FP)
    assert step == 5 and len(record) == 1


def test_checkpoint_of_another_job_is_refused(tmp_path):
    save_checkpoint(str(tmp_path), 5, state(5), FP)
    with pytest.raises(UserError, match="belongs to a different job"):
        load_latest(str(tmp_path), "0" * 64)


class Payload:
    """A pickle gadget: unpickling it calls print."""

    def __reduce__(self):
        return (print, ("this must never run",))


def test_arbitrary_objects_are_never_unpickled(tmp_path, capsys):
    save_checkpoint(str(tmp_path), 1, state(1), FP)
    # a checkpoint with a valid manifest whose payload carries code: refused, not executed
    save_checkpoint(str(tmp_path), 2, {"evil": Payload()}, FP)
    with pytest.warns(UserWarning, match="refused to load"):
        step, _ = load_latest(str(tmp_path), FP)
    assert step == 1 and "must never run" not in capsys.readouterr().out


def test_async_writes_while_the_caller_goes_on(tmp_path):
    ck = AsyncCheckpointer(str(tmp_path), FP)
    live = state(3)
    ck.save(3, live)
    live["w"].add_(100)  # training mutates the tensors right after save(): the snapshot holds
    ck.wait()
    step, got = load_latest(str(tmp_path), FP)
    assert step == 3 and torch.equal(got["w"], torch.full((3,), 3.0))
    assert load_latest(str(tmp_path / "none"), FP) is None


def test_checkpointer_cadence_by_steps(tmp_path):
    ck = Checkpointer(str(tmp_path), FP, every=3)
    asked = []

    def state_fn(step):
        asked.append(step)
        return state(step)

    saved = [s for s in range(1, 8) if ck.maybe_save(s, lambda s=s: state_fn(s))]
    ck.finish()
    assert saved == asked == [3, 6]  # the state is gathered only when a checkpoint is due
    assert load_latest(str(tmp_path), FP)[0] == 6


def test_checkpointer_cadence_by_seconds_and_final(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("shoal.runtime.checkpoint.time.monotonic", lambda: clock[0])
    ck = Checkpointer(str(tmp_path), FP, seconds=10.0)
    assert not ck.maybe_save(1, lambda: state(1))
    clock[0] = 110.0
    assert ck.maybe_save(2, lambda: state(2))
    clock[0] = 115.0
    assert not ck.maybe_save(3, lambda: state(3))  # the clock restarts at each checkpoint
    ck.final(4, state(4))
    assert load_latest(str(tmp_path), FP)[0] == 4


def test_checkpointer_off_by_default(tmp_path):
    ck = Checkpointer(str(tmp_path), FP)
    assert not any(ck.maybe_save(s, lambda: pytest.fail("gathered")) for s in range(1, 50))


def test_a_local_checkpoint_is_on_the_disk_before_its_name(tmp_path, monkeypatch):
    # each file is synced under its temporary name, then the folder after the rename: a power
    # loss leaves the earlier checkpoint or the whole new one, never an empty file named ckpt-*
    import os

    import shoal.runtime.checkpoint as ck

    synced, real_fsync = [], os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(ck.os, "fsync", fsync)
    save_checkpoint(str(tmp_path), 5, state(5), FP)
    base = str(tmp_path / "ckpt-000000005")
    assert synced == [f"{base}.pt.tmp", str(tmp_path), f"{base}.json.tmp", str(tmp_path)]
