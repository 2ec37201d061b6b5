"""The run directory: one run at a time, and nothing in it destroyed by a resume that fails,
finds nothing usable, or has nothing left to do."""

import dataclasses
import functools
import json
import os
import pathlib
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from shoal.config import BatchConfig, CheckpointConfig, RunConfig, SlowLinkConfig
from shoal.errors import RunFailed, UserError
from shoal.launcher.rundir import LOCK_FILE, RunLock, resume_hint, run_in_directory
from shoal.launcher.spec import RunSpec
from shoal.launcher.torchrun import check_fresh_start
from shoal.runtime.built import built_model
from shoal.runtime.checkpoint import (
    check_resumable,
    latest_checkpoint_step,
    save_checkpoint,
)
from shoal.runtime.outputs import append_line, job_fingerprint


def config(out, resume=True, steps=10) -> RunConfig:
    return RunConfig(job=DIGITS, steps=steps, out=str(out), resume=resume)


@functools.cache
def digits_fingerprint() -> str:
    return worker_fingerprint({})


def checkpoint(out, step, fingerprint=None):
    """A checkpoint of digits.py at `step` (the launcher checks a resume's fingerprint)."""
    state = {"step": step, "w": torch.ones(2)}
    save_checkpoint(str(out / "checkpoints"), step, state, fingerprint or digits_fingerprint())


def tiny_job(**fields) -> SimpleNamespace:
    """What job_fingerprint reads of a Job, for a job of 8 samples in batches of 4."""
    job = dict(micro_batch_size=2, global_batch_size=4, seed=0, dataset=[0] * 8)
    unset = {"batch_policy": None, "batch_options": {}, "autocast": None, "loss_scale": None}
    return SimpleNamespace(**{**job, **unset, **fields})


def test_second_run_refused_with_the_holders_pid(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from shoal.launcher.rundir import RunLock; "
         f"RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=f"in use by another shoal run \\(pid {holder.pid}\\)"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path):  # the kernel released the dead holder's lock
        pass


def test_stale_lock_of_a_dead_process_taken_over_with_a_warning(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(f"{dead.pid}\n")
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert f"taking over the lock of pid {dead.pid}" in capsys.readouterr().err


def test_resuming_a_finished_run_changes_nothing(tmp_path, capsys):
    result = {"final_step": 10, "state_sha256": "ab"}
    (tmp_path / "result.json").write_text(json.dumps(result))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    got = run_in_directory(config(tmp_path), lambda: pytest.fail("ran"))
    assert got == {**result, "earlier": True}  # the CLI then says the time is not its own
    assert "already finished at step 10" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != LOCK_FILE} == before


DIGITS = str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py")


def worker_fingerprint(options: dict, link: SlowLinkConfig | None = None) -> str:
    """The fingerprint a worker of digits.py with `options` writes (runtime/loop.py)."""
    from shoal.job import build_job, load_job_file
    from shoal.runtime.trainer import Trainer

    job = build_job(load_job_file(DIGITS), options, None)
    return job_fingerprint(DIGITS, options, job, "exact", Trainer(job).model, link)


def test_the_launchers_fingerprint_is_the_workers(tmp_path):
    """A finished run is told apart by the fingerprint its worker wrote: the launcher must
    compute the same one from the same flags, or it would refuse the run's own resume."""
    from shoal.launcher.rundir import config_fingerprint

    cfg = dataclasses.replace(config(tmp_path), job=DIGITS, options=["lr=0.1"])
    assert config_fingerprint(cfg) == worker_fingerprint({"lr": 0.1})
    assert config_fingerprint(dataclasses.replace(cfg, options=["lr=0.3"])) != config_fingerprint(
        cfg
    )
    compressed = dataclasses.replace(cfg, link=SlowLinkConfig(compress="topk:0.1"))
    assert config_fingerprint(compressed) == worker_fingerprint({"lr": 0.1}, compressed.link)
    assert config_fingerprint(compressed) != config_fingerprint(cfg)


def test_resuming_another_jobs_finished_run_is_refused_and_changes_nothing(tmp_path):
    """--resume of a finished run compared only the step count: another job file, or other
    options, reported success with the earlier job's digest."""
    result = {"final_step": 10, "state_sha256": "ab", "fingerprint": worker_fingerprint({})}
    (tmp_path / "result.json").write_text(json.dumps(result))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    ours = dataclasses.replace(config(tmp_path), job=DIGITS)
    assert run_in_directory(ours, lambda: pytest.fail("ran")) == {**result, "earlier": True}
    other = dataclasses.replace(ours, options=["lr=0.3"])
    with pytest.raises(UserError, match=r"result.json belongs to a different job \(fingerprint"):
        run_in_directory(other, lambda: pytest.fail("ran"))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != LOCK_FILE} == before


def test_resuming_another_jobs_checkpoint_is_refused_before_any_worker_starts(tmp_path):
    """An unfinished run's checkpoints belong to one job: a resume with other options was
    refused only by the workers, after the group formed, with a failed run on the console."""
    checkpoint(tmp_path, 4)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    other = dataclasses.replace(config(tmp_path), options=["lr=0.3"])
    with pytest.raises(UserError, match=r"checkpoint .*ckpt-0+4.json belongs to a different job"):
        run_in_directory(other, lambda: pytest.fail("a worker started"))
    after = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert {n: b for n, b in after.items() if n != LOCK_FILE} == before
    # the same job resumes
    finish = lambda: (tmp_path / "result.json").write_text('{"final_step": 10}')
    assert run_in_directory(config(tmp_path), finish) == {"final_step": 10}


def test_cli_resume_of_another_jobs_finished_run_is_one_line_and_exit_2(tmp_path):
    checkpoint(tmp_path, 9)  # a finished run keeps its final checkpoint
    result = {"final_step": 9, "fingerprint": worker_fingerprint({})}
    (tmp_path / "result.json").write_text(json.dumps(result))
    cmd = [sys.executable, "-m", "shoal", "run", DIGITS, "--workers", "v100", "--steps", "9",
           "--resume", str(tmp_path), "-o", "lr=0.3"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "belongs to a different job" in lines[0], proc.stderr
    assert json.loads((tmp_path / "result.json").read_text()) == result


def test_failed_resume_changes_nothing(tmp_path):
    checkpoint(tmp_path, 10)
    (tmp_path / "result.json").write_text('{"final_step": 10}')
    metrics = '{"kind": "step", "step": 9}\n'
    (tmp_path / "metrics.jsonl").write_text(metrics)

    def fails():
        assert not (tmp_path / "result.json").exists()  # the controller's "finished" signal
        append_line(tmp_path / "metrics.jsonl", {"kind": "membership", "event": "fail"})
        raise UserError("checkpoint belongs to a different job")

    with pytest.raises(UserError):
        run_in_directory(config(tmp_path, steps=20), fails)
    assert (tmp_path / "result.json").read_text() == '{"final_step": 10}'
    assert (tmp_path / "metrics.jsonl").read_text() == metrics


def test_a_resume_that_trained_keeps_its_lines_when_it_fails_later(tmp_path):
    checkpoint(tmp_path, 10)

    def trains_then_fails():
        append_line(tmp_path / "metrics.jsonl", {"kind": "step", "step": 10})
        raise RunFailed("every worker is gone at step 11")

    with pytest.raises(RunFailed):
        run_in_directory(config(tmp_path, steps=20), trains_then_fails)
    assert '"step": 10' in (tmp_path / "metrics.jsonl").read_text()


@pytest.mark.parametrize(
    "tail, kept",
    [
        ('{"kind": "st', ""),  # cut off mid-line: dropped, with a warning
        ('{"kind": "step", "step": 9}', '{"kind": "step", "step": 9}\n'),  # only its newline
    ],
)
def test_a_resume_does_not_run_into_a_line_cut_off_by_a_crash(tmp_path, capsys, tail, kept):
    """The resume's first line used to be appended onto the cut-off one: the controller failed
    on it after training, and the file kept an unreadable line mid-file (`shoal report` too)."""
    checkpoint(tmp_path, 10)
    head = '{"kind": "step", "step": 8}\n'
    (tmp_path / "metrics.jsonl").write_text(head + tail)

    def appends():
        append_line(tmp_path / "metrics.jsonl", {"kind": "step", "step": 10})
        (tmp_path / "result.json").write_text('{"final_step": 20}')

    run_in_directory(config(tmp_path, steps=20), appends)
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text == head + kept + '{"kind": "step", "step": 10}\n'
    assert ("dropping its last line" in capsys.readouterr().err) == (not kept)


@pytest.mark.parametrize(
    "bad, needle", [(b"\xff\xfe\n", "not UTF-8 text"), (b"[1, 2]\n", "line 2: expected a JSON")]
)
def test_a_resume_refuses_an_unreadable_metrics_line_before_it_runs(tmp_path, bad, needle):
    """Binary garbage failed the controller mid-run with a bare "'utf-8' codec can't decode"."""
    checkpoint(tmp_path, 10)
    (tmp_path / "metrics.jsonl").write_bytes(b'{"kind": "step", "step": 8}\n' + bad)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(UserError, match=needle):
        run_in_directory(config(tmp_path, steps=20), lambda: pytest.fail("ran"))
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "name, folder, resume",
    [
        (LOCK_FILE, True, False),  # os.open: IsADirectoryError
        ("logs", False, False),  # the attempt's folder: NotADirectoryError
        ("metrics.jsonl", True, True),  # a failed resume's cut: IsADirectoryError
        ("result.json", True, True),  # trained, then unlinking the set-aside: IsADirectoryError
    ],
)
def test_an_entry_of_the_wrong_type_is_refused_before_the_run(tmp_path, name, folder, resume):
    """A folder where the run writes a file (or a file where it makes a folder) was a traceback,
    one of them after the resume had trained; now one line before the lock, nothing changed."""
    if resume:
        checkpoint(tmp_path, 4)
    path = tmp_path / name
    path.mkdir() if folder else path.write_text("kept")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(UserError, match=f"{path} is not a"):
        run_in_directory(config(tmp_path, resume=resume), lambda: pytest.fail("ran"))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_fingerprint_follows_the_job_files_contents_not_its_name(tmp_path):
    model = torch.nn.Linear(2, 1)
    job = tiny_job()
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def make_job(): ...\n")
    b.write_text("def make_job(): ...\n")
    same = job_fingerprint(str(a), {}, job, "exact", model)
    assert job_fingerprint(str(b), {}, job, "exact", model) == same  # renamed: the same job
    b.write_text("def make_job(): return 1\n")
    assert job_fingerprint(str(b), {}, job, "exact", model) != same  # edited: another job


def test_resume_with_every_checkpoint_unusable_is_an_error(tmp_path, capsys):
    checkpoint(tmp_path, 4)
    checkpoint(tmp_path, 8)
    for pt in (tmp_path / "checkpoints").glob("*.pt"):
        pt.write_bytes(pt.read_bytes()[:-7])
    with pytest.raises(UserError, match=r"no usable checkpoint .* \(2 skipped"):
        run_in_directory(config(tmp_path), lambda: pytest.fail("ran"))
    assert capsys.readouterr().err.count("skipping checkpoint") == 2  # on the console


def test_resume_hint_names_the_step_or_says_there_is_none(tmp_path):
    spec = RunSpec(config(tmp_path), ["v100"])
    assert "no checkpoint was written" in resume_hint(spec)
    checkpoint(tmp_path, 6)
    assert latest_checkpoint_step(str(tmp_path / "checkpoints")) == 6
    assert check_resumable(str(tmp_path / "checkpoints")) == 6
    assert "checkpoint of step 6 with: shoal run" in resume_hint(spec)


def test_resume_hint_is_a_shoal_run_command_that_parses_back(tmp_path):
    """Whatever started the run (`shoal demo` has no --resume), the hint is the `shoal run`
    command that continues it: same job, steps, options and workers (tiers included)."""
    from shoal.cli import build_parser

    out = tmp_path / "a run"  # a space: the command is quoted
    checkpoint(out, 4)
    cfg = dataclasses.replace(config(out), options=["global_batch_size=256", "lr=0.1"])
    hint = resume_hint(RunSpec(cfg, ["v100", "k80"], tiers=["on_demand", "spot"]))
    command = hint.split(" with: ", 1)[1]
    words = shlex.split(command)
    assert words[:2] == ["shoal", "run"]
    args = build_parser().parse_args(words[1:])
    assert (args.job, args.steps, args.resume) == (DIGITS, 10, str(out))
    assert args.workers == "v100:on_demand,k80:spot"
    assert args.options == ["global_batch_size=256", "lr=0.1"]


def test_torchrun_refuses_another_runs_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    checkpoint(tmp_path, 3)  # written by job-a
    # its own: a late joiner, the agent's restart of a life that wrote it
    check_fresh_start(config(tmp_path, resume=False), "job-a")
    with pytest.raises(UserError, match="already holds checkpoints of another run"):
        check_fresh_start(config(tmp_path, resume=False), "job-b")
    with pytest.raises(UserError, match="already holds checkpoints of another run"):
        check_fresh_start(config(tmp_path, resume=False), None)  # an id torchrun makes up
    check_fresh_start(config(tmp_path, resume=True), "job-b")


def test_cli_resume_with_only_corrupt_checkpoints_is_one_line_and_exit_2(tmp_path):
    checkpoint(tmp_path, 5)
    for pt in (tmp_path / "checkpoints").glob("*.pt"):
        pt.write_bytes(b"\0" + pt.read_bytes()[1:])  # one flipped byte
    job = pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py"
    cmd = [sys.executable, "-m", "shoal", "run", str(job), "--workers", "v100", "--steps", "9",
           "--resume", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[0].startswith("shoal: warning: skipping checkpoint") and "checksum" in lines[0]
    assert lines[-1].startswith("shoal: error: --resume: no usable checkpoint") and len(lines) == 2
    assert not (tmp_path / "logs").exists()  # no worker was started


def test_a_fresh_run_keeps_an_earlier_runs_results_aside(tmp_path, capsys):
    from shoal.launcher.rundir import set_aside_earlier_results

    for n in (1, 2):
        (tmp_path / "metrics.jsonl").write_text(f"run {n}\n")
        (tmp_path / "result.json").write_text(f'{{"run": {n}}}')
        if n == 2:  # a provider run's scenario: not to be read as the next run's
            (tmp_path / "scenario.json").write_text(f'{{"run": {n}}}')
        set_aside_earlier_results(tmp_path)
        assert not (tmp_path / "metrics.jsonl").exists()
        assert (tmp_path / f"earlier-{n}-metrics.jsonl").read_text() == f"run {n}\n"
        assert (tmp_path / f"earlier-{n}-result.json").exists()
    assert not (tmp_path / "scenario.json").exists()
    assert (tmp_path / "earlier-2-scenario.json").read_text() == '{"run": 2}'
    assert "kept as earlier-2-*" in capsys.readouterr().err
    set_aside_earlier_results(tmp_path)  # nothing left to keep: nothing happens
    assert len(list(tmp_path.glob("earlier-*"))) == 5


def test_an_interrupt_after_the_last_step_is_not_a_failure(tmp_path):
    """Ctrl-C after the last step: result.json is written, the run is done. It was reported as
    "interrupted at step 40", exit 1, with a resume hint that then had nothing to do."""
    from shoal.launcher.rundir import wind_down

    controller = SimpleNamespace(
        pending=[], workers={}, members=[], steps_done=10,
        spec=RunSpec(config(tmp_path, steps=10), ["v100"]),
        read_progress=lambda: None, reap=lambda: None, admit_and_regroup=lambda: None,
    )  # fmt: skip
    assert "interrupted at step 10" in wind_down(controller, grace_s=0)
    (tmp_path / "result.json").write_text(json.dumps({"final_step": 10}))
    assert wind_down(controller, grace_s=0) is None


def test_an_interrupt_logs_no_worker_that_was_still_starting(tmp_path):
    """Ctrl-C reaches the workers too: one still starting (building its model) died of it
    before the launcher stopped it, and was logged as lost ("exited with code -2")."""
    from shoal.launcher.rundir import wind_down

    died = SimpleNamespace(poll=lambda: -2)  # ended by the Ctrl-C, not yet reaped
    w1 = SimpleNamespace(state="starting", proc=died, resume_at=None, cause="")
    controller = SimpleNamespace(
        pending=[], workers={"w1": w1}, members=[], steps_done=0,
        spec=RunSpec(config(tmp_path, steps=10), ["v100"]),
        read_progress=lambda: None, reap=lambda: None, admit_and_regroup=lambda: None,
    )  # fmt: skip
    wind_down(controller, grace_s=0)
    assert w1.state == "gone"  # reap() logs no event for it


def test_a_run_without_slow_link_settings_keeps_its_fingerprint(tmp_path):
    """Checkpoints written before the slow-link settings were hashed stay resumable: without
    --compress or --local-steps the fingerprint is the one computed before, --sites (which
    then has no effect) included."""
    import hashlib

    model = torch.nn.Linear(2, 1)
    job = tiny_job()
    path = tmp_path / "job.py"
    path.write_text("def make_job(): ...\n")
    shapes = [(n, str(p.dtype), tuple(p.shape)) for n, p in model.state_dict().items()]
    source = hashlib.sha256(path.read_bytes()).hexdigest()
    blob = json.dumps(
        [source, 8, [("lr", 0.1)], 2, 4, 0, "exact", shapes], default=repr
    )  # the fingerprint as it was: what old checkpoints and results hold
    before = hashlib.sha256(blob.encode()).hexdigest()
    for link in (None, SlowLinkConfig(), SlowLinkConfig(sites="0/1")):
        assert job_fingerprint(str(path), {"lr": 0.1}, job, "exact", model, link) == before


def test_slow_link_settings_that_change_training_change_the_fingerprint(tmp_path):
    """A --resume with another way across the links, keep ratio, pipeline, sparse optimizer,
    outer settings or site layout continued the run silently (a local-update run went on as
    a compressed one): each is another job now. Spellings of one setting are one job."""
    model = torch.nn.Linear(2, 1)
    job = tiny_job()
    path = tmp_path / "job.py"
    path.write_text("def make_job(): ...\n")

    def fp(**link):
        return job_fingerprint(str(path), {}, job, "exact", model, SlowLinkConfig(**link))

    topk, local = dict(compress="topk:0.1", sites="0/1"), dict(local_steps=3, sites="0/1")
    distinct = [
        fp(),
        fp(**topk),
        fp(**{**topk, "compress": "topk:0.2"}),
        fp(**{**topk, "compress": "blocktopk:0.1"}),
        fp(**{**topk, "compress": "auto"}),
        fp(**{**topk, "pipeline": True}),
        fp(**{**topk, "sparse_optim": "dense"}),
        fp(**{**topk, "sites": "1/0"}),  # a site's residuals are kept under its index
        fp(**{**topk, "sites": "0,1"}),
        fp(**{**topk, "sites": None}),
        fp(**local),
        fp(**{**local, "local_steps": 4}),
        fp(**{**local, "outer_lr": 0.5}),
        fp(**{**local, "outer_momentum": 0.5}),
        fp(**{**local, "outer_overlap": 2}),
        fp(**{**local, "sites": "0,1"}),
    ]
    assert len(set(distinct)) == len(distinct)
    assert fp(**topk) == fp(compress="topk:0.10", sites=" 0 / 1 ")
    # a mode's default given as a flag is the default
    assert fp(**local) == fp(**local, outer_lr=0.7, outer_momentum=0.9)
    assert fp(**topk) == fp(**topk, sparse_optim="lazy")


def test_resuming_a_finished_run_with_other_slow_link_flags_is_refused(tmp_path):
    local = SlowLinkConfig(sites="0/1", local_steps=3)
    result = {"final_step": 10, "fingerprint": worker_fingerprint({}, local)}
    (tmp_path / "result.json").write_text(json.dumps(result))
    ours = dataclasses.replace(config(tmp_path), job=DIGITS, link=local)
    assert run_in_directory(ours, lambda: pytest.fail("ran")) == {**result, "earlier": True}
    for link in (SlowLinkConfig(sites="0/1", compress="topk:0.1"), SlowLinkConfig()):
        other = dataclasses.replace(ours, link=link)
        with pytest.raises(UserError, match=r"result.json belongs to a different job"):
            run_in_directory(other, lambda: pytest.fail("ran"))


# job_fingerprint's digests as computed by the code before the batch settings were hashed
# (commit 4e11367), for tiny_job, Linear(2, 1), -o lr=0.1 and a job file "def make_job(): ...":
# what the checkpoints and results of those runs hold
BEFORE_BATCH = {
    "plain": "e168d032cd677dc4766729f65da428d6f2454496ca798cf74c3ec0ffbdd15c0b",
    "topk": "a2c9ff1b600d8e27cc713d889dcdab72530b47cf349839b0a6f8080bfaf8bf5e",
    "local": "3f55eb6406ddcce260c2d6c07c084b8f6d2956a2fbdb8b58b5806d8b11c5f51e",
}


def test_a_fixed_batch_run_keeps_its_fingerprint(tmp_path):
    """Checkpoints written before the batch settings were hashed stay resumable: with the
    fixed policy, the default, named by flag or by the job, with or without the --batch-*
    knobs it ignores, the fingerprint is the one computed before."""
    model = torch.nn.Linear(2, 1)
    path = tmp_path / "job.py"
    path.write_text("def make_job(): ...\n")
    links = {
        "plain": None,
        "topk": SlowLinkConfig(compress="topk:0.1", sites="0/1"),
        "local": SlowLinkConfig(local_steps=3, sites="0/1"),
    }
    knobs = dict(bounds="2:8", every=5, lr_scaling="sqrt", reference="v100", sync=1.0)
    fixed = (None, BatchConfig(), BatchConfig(policy="fixed"), BatchConfig("fixed", **knobs))
    for name, link in links.items():
        for batch in fixed:
            for job in (tiny_job(), tiny_job(batch_policy="fixed")):
                got = job_fingerprint(str(path), {"lr": 0.1}, job, "exact", model, link, batch)
                assert got == BEFORE_BATCH[name], (name, batch, job.batch_policy)


def test_batch_settings_that_change_training_change_the_fingerprint(tmp_path):
    """A run checkpointed under --batch-policy jabas resumed under fixed, another policy or
    other knobs without complaint, giving a result no uninterrupted run gives: each is another
    job now. Spellings of one setting are one job, and so are a knob of the throughput model
    for a policy that does not weigh throughput (jabas) and a policy set by the job or by flag."""
    from shoal.job import build_job, load_job_file
    from shoal.launcher.rundir import config_fingerprint

    cfg = dataclasses.replace(config(tmp_path), job=DIGITS)  # b = 16, B = 64, 1797 samples

    def fp(**batch):
        return config_fingerprint(dataclasses.replace(cfg, batch=BatchConfig(**batch)))

    distinct = [
        fp(),
        fp(policy="jabas"),
        fp(policy="jabas", options=("gamma=0.2",)),
        fp(policy="jabas", options=("alpha=0.2",)),
        fp(policy="jabas", options=("smoothing=0.5",)),
        fp(policy="jabas", every=50),
        fp(policy="jabas", lr_scaling="sqrt"),
        fp(policy="jabas", bounds="32:256"),
        fp(policy="pollux", reference="v100"),
        fp(policy="pollux", reference="k80"),
        fp(policy="pollux", reference="v100", sync=1.0),
        fp(policy="pollux", reference="v100", options=("min_gain=1.1",)),
        fp(policy="shoal", reference="v100"),
        fp(policy="shoal", reference="v100", options=("max_growth=4",)),
        fp(policy="schedule", options=("ramp=64@0,128@10",)),
        fp(policy="schedule", options=("ramp=64@0,128@20",)),
        fp(policy="schedule", options=("ramp_loss=64@inf,128@1.0",)),
    ]
    assert len(set(distinct)) == len(distinct)
    jabas = fp(policy="jabas")
    assert jabas == fp(
        policy="jabas",
        bounds="16:1792",  # the default: one micro-batch to the epoch's whole micro-batches
        every=100,
        lr_scaling="none",
        options=("gamma=0.10", "alpha=1e-1", "smoothing=0.9"),
    )
    assert jabas == fp(policy="jabas", reference="k80", sync=2.0)  # jabas weighs no throughput
    assert fp(policy="pollux", reference="2xk80,v100") == fp(
        policy="pollux", reference="K80,k80,V100"
    )
    # the job's own policy and options are the flags'; a flag over them is another setting
    job = build_job(load_job_file(DIGITS), {}, None)
    model = built_model(job, "cpu")
    own = dataclasses.replace(job, batch_policy="jabas", batch_options={"every": 100, "gamma": 0.1})
    assert job_fingerprint(DIGITS, {}, own, "exact", model, None, BatchConfig()) == jabas
    bare = dataclasses.replace(job, batch_policy="jabas")
    assert job_fingerprint(DIGITS, {}, bare, "exact", model, None, BatchConfig()) == jabas
    flagged = BatchConfig(policy="fixed")
    assert job_fingerprint(DIGITS, {}, bare, "exact", model, None, flagged) == fp()
    shifted = dataclasses.replace(own, batch_options={"gamma": 0.2})
    assert job_fingerprint(DIGITS, {}, shifted, "exact", model, None, BatchConfig()) == distinct[2]


def test_resuming_a_finished_run_with_other_batch_flags_is_refused(tmp_path):
    from shoal.launcher.rundir import config_fingerprint

    ours = dataclasses.replace(config(tmp_path), job=DIGITS, batch=BatchConfig(policy="jabas"))
    result = {"final_step": 10, "fingerprint": config_fingerprint(ours)}
    (tmp_path / "result.json").write_text(json.dumps(result))
    assert run_in_directory(ours, lambda: pytest.fail("ran")) == {**result, "earlier": True}
    for batch in (BatchConfig(), BatchConfig(policy="jabas", every=10)):
        other = dataclasses.replace(ours, batch=batch)
        with pytest.raises(UserError, match=r"result.json belongs to a different job"):
            run_in_directory(other, lambda: pytest.fail("ran"))


def test_resume_hint_gives_every_flag_the_run_was_given(tmp_path):
    """The hint left out the slow-link flags (and every other one but -o), which a resume
    needs: without them it is refused as another job, or continues another way."""
    from shoal.cli import build_parser
    from shoal.cli.run import config_from_args
    from shoal.launcher.spec import with_implied_reference

    out = tmp_path / "run"
    checkpoint(out, 4)
    cfg = RunConfig(
        "job.py",
        40,
        str(out),
        resume=True,
        seed=3,
        options=("lr=0.1",),
        threads=2,
        checkpoint=CheckpointConfig(every=5, dir=str(tmp_path / "ck")),
        batch=BatchConfig(policy="fixed", bounds="32:64", reference="2xk80,v100"),
        link=SlowLinkConfig(
            sites="0/1,2", compress="topk:0.1", pipeline=True, sparse_optim="dense"
        ),
    )
    save_checkpoint(str(tmp_path / "ck"), 4, {"step": 4}, "f" * 64)
    hint = resume_hint(RunSpec(cfg, ["k80", "k80", "v100"]))
    assert "other flags" not in hint
    words = shlex.split(hint.split(" with: ", 1)[1])
    resumed = config_from_args(build_parser().parse_args(words[1:]))
    # the reference shoal run sets from --workers is not repeated; it names the same kinds
    assert "--batch-reference" not in words and resumed.batch.reference is None
    implied = with_implied_reference(RunSpec(resumed, ["k80", "k80", "v100"])).config
    assert implied.batch.reference == "k80,k80,v100"
    batch = dataclasses.replace(cfg.batch, reference=implied.batch.reference)
    assert implied == dataclasses.replace(cfg, batch=batch, emulation=resumed.emulation)
    local = dataclasses.replace(cfg, link=SlowLinkConfig(local_steps=4, outer_overlap=2))
    words = shlex.split(resume_hint(RunSpec(local, ["k80"])).split(" with: ", 1)[1])
    assert config_from_args(build_parser().parse_args(words[1:])).link == local.link


@pytest.mark.parametrize("provider", [[], ["--provider", "local"]])
@pytest.mark.parametrize("finished", [True, False])
def test_shoal_run_resume_builds_the_job_once(tmp_path, capsys, finished, provider):
    """`shoal run --resume` built the job in its checks, then again for the fingerprint of the
    result or checkpoint (and once more for --provider): each a make_job of the user's."""
    from shoal.cli import main
    from shoal.launcher.rundir import config_fingerprint

    calls = tmp_path / "calls"
    job = tmp_path / "job.py"
    job.write_text(
        f"import runpy\n_digits = runpy.run_path({DIGITS!r})\n"
        f"def make_job(**options):\n    with open({str(calls)!r}, 'a') as f:\n"
        "        f.write('x')\n    return _digits['make_job'](**options)\n"
    )
    out = tmp_path / "run"
    fingerprint = config_fingerprint(dataclasses.replace(config(out), job=str(job)))
    if finished:  # a finished run of this job: reported, not redone
        result = {"final_step": 10, "wall_time_s": 1.0, "samples_per_s": 1.0, "state_sha256": "a"}
        (out / "checkpoints").mkdir(parents=True)
        (out / "checkpoints" / "ckpt-00000010.json").write_text("{}")  # not read: finished
        (out / "result.json").write_text(json.dumps({**result, "fingerprint": fingerprint}))
    else:  # another job's checkpoint: refused before any worker starts
        out.mkdir()
        checkpoint(out, 4, fingerprint="0" * 64)
    calls.unlink()
    argv = ["run", str(job), "--workers", "k80", "--steps", "10", "--resume", str(out)]
    code = main([*argv, *provider])
    err = capsys.readouterr().err
    assert code == (0 if finished else 2), err
    assert ("nothing to do" if finished else "belongs to a different job") in err
    assert calls.read_text() == "x"  # make_job ran once


def test_the_jobs_precision_changes_the_fingerprint_and_its_spellings_do_not(tmp_path):
    """A job file whose autocast or loss scale depends on something outside it (an environment
    variable) resumed under another precision: each setting is another job now."""
    model, path = torch.nn.Linear(2, 1), tmp_path / "job.py"
    path.write_text("def make_job(): ...\n")

    def fingerprint(**fields) -> str:
        return job_fingerprint(str(path), {}, tiny_job(**fields), "exact", model)

    plain, half = fingerprint(), fingerprint(autocast="float16")
    dynamic = fingerprint(autocast="float16", loss_scale="dynamic")
    assert len({plain, half, dynamic, fingerprint(autocast="bfloat16")}) == 4
    assert fingerprint(autocast="float16", loss_scale={"init_scale": 65536}) == dynamic
    assert fingerprint(autocast="float16", loss_scale=65536) != dynamic  # fixed, not dynamic
    assert fingerprint(autocast="float16", loss_scale={"growth_interval": 100}) != dynamic
