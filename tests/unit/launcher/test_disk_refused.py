"""The launcher's side of a disk that refuses writes: refused up front where it can be seen
(a read-only --checkpoint-dir), a worker's refused write a failed run with the resume command,
and any write no layer named still one line."""

import errno
import json
import os
import types

import pytest

from shoal.cli import main
from shoal.errors import CAUSE_SUFFIX, RunFailed, UserError
from shoal.launcher import spec, supervisor


def test_a_read_only_checkpoint_dir_is_refused_before_any_worker(tmp_path, monkeypatch):
    def read_only(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(spec.tempfile, "TemporaryFile", read_only)
    target = str(tmp_path / "ck")
    with pytest.raises(UserError, match=f"cannot write to --checkpoint-dir '{target}': Read-only"):
        spec.check_storage(target)
    assert not (tmp_path / "ck").exists()  # the check creates nothing


def _controller(logs):
    ctl = types.SimpleNamespace(logs=logs, verbose=False, spec=None)
    ctl.storage_error = lambda cause: supervisor.Controller.storage_error(ctl, cause)
    return ctl


@pytest.mark.parametrize("cause_file", [True, False])
def test_a_workers_refused_write_fails_the_run_with_the_resume_command(
    tmp_path, monkeypatch, cause_file
):
    monkeypatch.setattr(supervisor, "resume_hint", lambda spec: "continue with: shoal run ...")
    line = "cannot write '/r/metrics.jsonl': No space left on device"
    log = tmp_path / "w0.log"
    log.write_text(f"[w0 +1.0s] ready\nshoal: error: {line}\n")
    if cause_file:  # else: no room was left for it, the log's last line tells it
        report = {"worker": "w0", "cause": line, "traceback": "", "storage": True}
        (tmp_path / f"w0{CAUSE_SUFFIX}").write_text(json.dumps(report))
    worker = types.SimpleNamespace(id="w0", log=log)
    with pytest.raises(RunFailed) as caught:
        supervisor.Controller.user_error(_controller(tmp_path), worker)
    assert str(caught.value) == f"{line}; continue with: shoal run ..."


def test_a_write_no_layer_named_is_one_line_exit_1(monkeypatch, capsys):
    def full(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/logs/attempt-2")

    parser_args = types.SimpleNamespace(func=full, verbose=False)
    monkeypatch.setattr(
        "shoal.cli.build_parser",
        lambda: types.SimpleNamespace(parse_args=lambda argv: parser_args),
    )
    assert main(["report", "x"]) == 1
    err = capsys.readouterr().err
    assert err == "shoal: run failed: cannot write '/r/logs/attempt-2': No space left on device\n"
