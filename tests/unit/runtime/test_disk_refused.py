"""A disk that refuses a write (full, read-only) mid-run: one line naming the file, and what was
written before stays whole, so a --resume continues once there is room."""

import errno
import json
import os
import types

import fsspec.implementations.local
import pytest
import torch

from shoal.errors import CAUSE_SUFFIX, StorageError, UserError
from shoal.runtime import job_errors, outputs
from shoal.runtime.checkpoint import load_latest, save_checkpoint

FP = "f" * 64
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_short_append_is_cut_back_and_named(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    outputs.append_line(path, {"kind": "step", "step": 1})
    whole = path.read_bytes()
    real = os.write
    # a full disk takes what fits and returns the count: half a line was left mid-file
    monkeypatch.setattr(outputs.os, "write", lambda fd, data: real(fd, data[:7]))
    with pytest.raises(StorageError, match=rf"cannot write '{path}': No space left on device"):
        outputs.append_line(path, {"kind": "step", "step": 2})
    assert path.read_bytes() == whole

    def refuse(fd, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(outputs.os, "write", refuse)
    with pytest.raises(StorageError, match="Read-only file system"):
        outputs.append_line(path, {"kind": "step", "step": 2})
    assert path.read_bytes() == whole


def test_result_json_not_written_leaves_no_partial_file(tmp_path, monkeypatch):
    def full(self, *a, **k):
        raise ENOSPC

    monkeypatch.setattr(outputs.pathlib.Path, "write_text", full)
    with pytest.raises(StorageError, match="cannot write '.*result.json': No space left"):
        outputs.write_json_atomic(tmp_path / "result.json", {"final_step": 3})
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_the_disk_refuses_keeps_the_earlier_ones(tmp_path, monkeypatch):
    url = str(tmp_path)
    save_checkpoint(url, 10, {"step": 10, "w": torch.ones(3)}, FP)
    before = sorted(p.name for p in tmp_path.iterdir())

    def full(self, *a, **k):  # the .tmp is written (partly), its rename fails
        raise ENOSPC

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "mv", full)
    with pytest.raises(StorageError) as caught:
        save_checkpoint(url, 20, {"step": 20, "w": torch.zeros(3)}, FP)
    assert str(caught.value) == (
        f"cannot write checkpoint '{tmp_path}/ckpt-000000020.pt': No space left on device"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no partial .tmp left
    step, state = load_latest(url, FP)
    assert step == 10 and torch.equal(state["w"], torch.ones(3))


# under shoal run the worker's line is a UserError (exit 2) that the launcher, reading the
# cause file's storage mark, tells as a failed run with the resume command; under torchrun no
# launcher reads it: the worker's entry tells it as a failed run itself (exit 1)
@pytest.mark.parametrize("worker_id, raised", [("w0", UserError), (None, StorageError)])
def test_a_worker_reports_a_refused_write_as_storage(tmp_path, monkeypatch, worker_id, raised):
    if worker_id:
        monkeypatch.setenv("SHOAL_WORKER_ID", worker_id)
    else:
        monkeypatch.delenv("SHOAL_WORKER_ID", raising=False)
        monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("SHOAL_CAUSE_DIR", str(tmp_path))
    config = types.SimpleNamespace(out=str(tmp_path))

    @job_errors.reports_errors
    def main(config):
        raise StorageError("cannot write 'x/metrics.jsonl': No space left on device")

    with pytest.raises(raised) as caught:
        main(config)
    assert type(caught.value) is raised
    assert str(caught.value).startswith("cannot write 'x/metrics.jsonl'")
    report = json.loads((tmp_path / f"w0{CAUSE_SUFFIX}").read_text())
    assert report["storage"] is True and report["cause"].startswith("cannot write ")
