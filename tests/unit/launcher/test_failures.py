"""The launcher's side of failure handling, without starting workers: one-line causes for the
job file's own errors, flags and storage checked up front, numbered attempt logs, console lines
and events that cannot fire."""

import pytest

from shoal.cli import main
from shoal.config import RunConfig
from shoal.errors import UserError, cause_line
from shoal.launcher.events import parse_events
from shoal.launcher.spec import RunSpec, check_storage, unreachable_events
from shoal.launcher.supervisor import ASKED_TO_LEAVE, attempt_dir, describe
from shoal.metrics.training import MembershipEvent


def run(capsys, job, *extra):
    code = main(["run", str(job), "--workers", "v100", "--steps", "3", *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "body, where, what",
    [
        ("def make_job(:\n    pass\n", ":1:", "SyntaxError: invalid syntax"),
        ("import json\nimport no_such_module_xyz\n", ":2:", "ModuleNotFoundError"),
        ("def make_job():\n    x = 1\n    return x / 0\n", ":3:", "ZeroDivisionError"),
    ],
)
def test_job_file_errors_are_one_line_with_file_and_line(tmp_path, capsys, body, where, what):
    job = tmp_path / "job.py"
    job.write_text(body)
    code, err = run(capsys, job, "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith(f"shoal: error: {job}{where} {what}")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out" / "logs").exists()  # no worker was started
    code, err = run(capsys, job, "--out", str(tmp_path / "out"), "--verbose")
    assert code == 2 and "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith(f"shoal: error: {job}{where}")


def test_bad_flags_and_storage_fail_before_any_worker(tmp_path, capsys):
    digits = "examples/digits.py"
    code, err = run(capsys, digits, "--out", str(tmp_path / "a"), "--threads", "0")
    assert code == 2 and "--threads must be >= 1" in err
    code, err = run(capsys, digits, "--out", str(tmp_path / "b"), "--peer-timeout", "0")
    assert code == 2 and "--peer-timeout must be > 0" in err
    with pytest.raises(UserError, match="--checkpoint-dir nosuchfs://x"):
        check_storage("nosuchfs://x")
    check_storage("file:///tmp/x")  # installed: accepted
    check_storage(str(tmp_path))  # a plain directory: nothing to check


def test_cause_line_points_at_the_users_frame(tmp_path):
    job = tmp_path / "userjob.py"
    job.write_text("import json\ndef f():\n    return json.loads('{')\n")
    namespace = {}
    exec(compile(job.read_text(), str(job), "exec"), namespace)
    with pytest.raises(ValueError) as info:
        namespace["f"]()
    # the innermost frame is in the json module; the line at fault is the user's
    assert cause_line(info.value).startswith(f"{job}:3: JSONDecodeError: Expecting")
    assert cause_line(UserError("bad input")) == "bad input"


def test_attempt_logs_are_numbered_never_reused(tmp_path):
    logs = tmp_path / "logs"
    first, second = attempt_dir(logs), attempt_dir(logs)
    assert (first.name, second.name) == ("attempt-1", "attempt-2")
    (first / "w0.log").write_text("kept")
    (logs / "attempt-9").mkdir()
    assert attempt_dir(logs).name == "attempt-10"
    assert (first / "w0.log").read_text() == "kept"


def test_console_lines_of_membership_events():
    kill = MembershipEvent("fail", "w1", "k80", step=10, detail="killed (SIGKILL)")
    assert describe(kill) == "step 10: w1 (k80) lost: killed (SIGKILL)"
    rec = MembershipEvent("recover", "w0", "v100", 10, recovery_time_s=1.234, lost_steps=1,
                          detail="generation 1: 2 workers")  # fmt: skip
    assert describe(rec) == "step 10: recovered in 1.23s, 1 step lost (generation 1: 2 workers)"
    assert describe(MembershipEvent("join", "w3", "k80", 20)) == "step 20: w3 (k80) joined"
    # a leave asked for (the scaler's smaller mix, `--events "... leave 1"`) is not called a
    # notice, which reads as a revocation; a notice still is
    asked = MembershipEvent("notice", "w1", "k80", 4, detail=ASKED_TO_LEAVE)
    assert describe(asked) == "step 4: w1 (k80) was asked to leave at the next step boundary"
    noticed = MembershipEvent("notice", "w1", "k80", 4, detail="leave at the next step boundary")
    assert describe(noticed) == "step 4: w1 (k80) got a notice: leave at the next step boundary"


def test_events_that_cannot_fire_are_named():
    events = parse_events(
        "step 5: kill 0; step 30: add k80; at 3s: add v100; step 29: leave 1; step 9: kill w4"
    )
    spec = RunSpec(RunConfig("job.py", 30, "out"), ["v100", "k80"], events)
    # w0, w1 and the two added workers w2, w3 exist at some point; w4 never does
    assert [str(e) for e in unreachable_events(spec)] == ["step 30: add k80", "step 9: kill w4"]
    assert [str(e) for e in events][:4] == [
        "step 5: kill w0", "step 30: add k80", "at 3s: add v100", "step 29: leave w1",
    ]  # fmt: skip


def test_hundreds_of_local_workers_are_refused_before_any_starts():
    from types import SimpleNamespace

    from shoal.launcher.spec import check_process_count, local_worker_limit

    limit = local_worker_limit()
    config = RunConfig("job.py", 10, "out")
    check_process_count(SimpleNamespace(kinds=["v100"] * limit, config=config))  # at the limit
    with pytest.raises(UserError, match=f"1000 local worker processes at once, more than {limit}"):
        check_process_count(SimpleNamespace(kinds=["v100"] * 1000, config=config))


def test_adds_past_the_process_limit_wait_for_a_process_to_end(tmp_path, monkeypatch):
    """1,000 `add` events at one step started 1,000 torch processes at once."""
    import types

    from shoal.launcher import supervisor
    from shoal.launcher.spec import RunSpec, Speeds

    events = parse_events("; ".join(["step 0: add k80"] * 5))
    spec = RunSpec(config=RunConfig("job.py", 10, str(tmp_path)), kinds=[], events=events)
    ctl = supervisor.Controller(spec, Speeds({"k80": 1.0}, {"k80": 0.1}), show_progress=False)
    alive = types.SimpleNamespace(poll=lambda: None)
    spawned = []

    def spawn(kind):
        w = supervisor.Worker(f"w{len(ctl.workers)}", kind, alive, tmp_path)
        ctl.workers[w.id] = w
        spawned.append(w)
        return w

    monkeypatch.setattr(ctl, "spawn", spawn)
    monkeypatch.setattr(supervisor, "local_worker_limit", lambda: 3)
    ctl.fire_events()
    assert len(spawned) == 3 and len(ctl.pending) == 2  # the rest wait
    spawned[0].proc = types.SimpleNamespace(poll=lambda: 0)  # one ends
    ctl.fire_events()
    assert len(spawned) == 4 and len(ctl.pending) == 1


def test_a_stall_is_a_membership_line_and_a_console_line():
    line = MembershipEvent("stall", "w1", "v100", step=10, detail="SIGSTOP for 8s")
    assert MembershipEvent.from_json(line.to_json()) == line  # the schema knows the kind
    assert describe(line) == "step 10: w1 (v100) stalled: SIGSTOP for 8s"


def test_events_that_cannot_fire_are_one_warning(monkeypatch, capsys):
    """An --events file of many events past --steps printed a warning per event."""
    from types import SimpleNamespace

    import shoal.launcher.rundir
    import shoal.launcher.spec as spec_module
    from shoal.launcher.supervisor import Controller

    monkeypatch.setattr(spec_module, "check_run", lambda spec: (None, None))
    monkeypatch.setattr(shoal.launcher.rundir, "run_in_directory", lambda config, run, job: {})
    events = parse_events("; ".join(f"step {n}: kill 0" for n in range(10, 60)))
    for given, told in [
        (events[:1], "event 'step 10: kill w0' can never fire"),
        (
            events,
            "50 events ('step 10: kill w0', 'step 11: kill w0', 'step 12: kill w0' and 47 more) "
            "can never fire",
        ),
    ]:
        spec = RunSpec(RunConfig("job.py", 5, "out"), ["v100", "k80"], given)
        spec_module.run_local(spec)
        assert capsys.readouterr().err == f"shoal: warning: {told}\n"
    # and the run's end: the events still pending when it ended
    for given, told in [
        (events[:1], "event 'step 10: kill w0' never fired"),
        (events[:4], "4 events ('step 10: kill w0', 'step 11: kill w0', 'step 12: kill w0' and "
                     "1 more) never fired"),
        (events[:2], "2 events ('step 10: kill w0', 'step 11: kill w0') never fired"),
    ]:  # fmt: skip
        Controller.report_unused(SimpleNamespace(pending=given, steps_done=9, workers={}))
        assert capsys.readouterr().err == f"shoal: warning: {told}: the run ended at step 9\n"
