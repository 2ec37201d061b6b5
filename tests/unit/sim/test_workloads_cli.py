"""Workload loaders, bad input (one line naming file and line, exit code 2) and the CLI."""

import json
import os
import subprocess

import pytest

from shoal.cli import main
from shoal.errors import UserError
from shoal.sim.run import simulate
from shoal.sim.workloads import load_workload, sample_philly

HEADER = "name,time,application,num_replicas,batch_size\n"


def test_pollux_workloads_load():
    jobs = load_workload("pollux:6")
    assert len(jobs) == 160
    assert {j.app for j in jobs} == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}


def test_philly_sampling_is_seeded_and_consecutive():
    a, b = sample_philly(50, seed=3), sample_philly(50, seed=3)
    assert [j.name for j in a] == [j.name for j in b]
    assert a[0].arrival_s == 0 and all(x.arrival_s <= y.arrival_s for x, y in zip(a, a[1:]))
    assert [j.name for j in sample_philly(50, seed=4)] != [j.name for j in a]


@pytest.mark.parametrize(
    "row, message",
    [
        ("a,10,cifar10,two,128", "bad or missing 'num_replicas'"),
        ("a,-5,cifar10,2,128", "time must be >= 0"),
        ("a,10,resnet9000,2,128", "unknown application"),
        ("a,10,cifar10", "bad or missing 'num_replicas'"),
        # NaN was 'cannot convert float NaN to integer'; inf ran no job to makespan inf, exit 0
        ("a,nan,cifar10,2,128", "bad or missing 'time' value 'nan'"),
        ("a,inf,cifar10,2,128", "bad or missing 'time' value 'inf'"),
        # other scripts' digits (FULLWIDTH TWO) were taken as 2 replicas, a time of 10 s
        ("a,10,cifar10,\uff12,128", "bad or missing 'num_replicas' value '\uff12'"),
        ("a,1\uff10,cifar10,2,128", "bad or missing 'time' value '1\uff10'"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, row, message):
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "ok,1,ncf,1,256\n" + row + "\n")
    with pytest.raises(UserError, match=message) as info:
        load_workload(str(path))
    assert f"{path}:3:" in str(info.value)


def test_bad_philly_row(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,60,1,60,x\n")
    with pytest.raises(UserError, match=f"{path}:2: bad timestamp"):
        load_workload(str(path))


@pytest.mark.parametrize("gpus", ["inf", "1e400"])
def test_philly_row_with_infinite_gpus(tmp_path, gpus):
    """Was a traceback: OverflowError, cannot convert float infinity to integer."""
    path = tmp_path / "philly.csv"
    path.write_text(f"timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03,60,{gpus},60,x\n")
    with pytest.raises(UserError, match=f"{path}:2: bad or missing 'num_gpus'"):
        load_workload(str(path))


def test_philly_row_wider_than_any_cluster(tmp_path):
    """1e300 GPUs was taken, and yarn-cs's refusal printed a 300-digit number."""
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03,60,1e300,60,x\n")
    with pytest.raises(UserError) as err:
        load_workload(str(path))
    assert str(err.value) == (
        f"{path}:2: num_gpus must be at most 100,000 (the largest cluster), got '1e300'"
    )


@pytest.mark.parametrize(
    "header, row, column",
    [
        (HEADER, "a,0,cifar10,99999999999999999999,128", "num_replicas"),
        (
            "name,time,application,max_parallelism,batch_size,epochs\n",
            "a,0,bert,100001,8,1",
            "max_parallelism",
        ),
    ],
)
def test_a_pollux_or_easyscale_row_wider_than_any_cluster(tmp_path, header, row, column):
    """Was taken: an elastic policy ran the job (exit 0), a gang policy's refusal printed the
    20-digit count."""
    path = tmp_path / "w.csv"
    path.write_text(header + row + "\n")
    with pytest.raises(UserError) as err:
        load_workload(str(path))
    count = row.split(",")[3]
    assert str(err.value) == (
        f"{path}:2: {column} must be at most 100,000 (the largest cluster), got {count!r}"
    )


def test_cli_a_batch_that_never_finishes_is_refused(tmp_path, capsys):
    """YARN-CS ran a job of batch 10^8 on its one GPU past the one-year horizon: exit 0, no job
    finished, a makespan of 52,579,733 s and 5,111 USD."""
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "a,0,cifar10,1,100000000\n")
    argv = ["simulate", "--workload", str(path), "--cluster", "1x4xt4", "--policy", "yarn-cs"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shoal: error: {path}:2: batch_size 1e+08: the job alone would run")
    assert err.count("\n") == 1


def test_the_packaged_pollux_workloads_fit_the_horizon():
    """The check above refuses no job of Pollux's own traces (the longest alone: 0.4 days)."""
    for load in ("0.5", "1.0", "1.5", "2.0"):
        for n in range(1, 9):
            assert load_workload(f"pollux:{n}:{load}")


ES_HEADER = "name,time,application,max_parallelism,batch_size,epochs,"
ES_HEADER += "enable_heterogeneous_deterministic,preferred_gpu,\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (ES_HEADER + "a,10,bert,4,8,1e300,1,v100,0\n", "2: epochs 1e+300: the job alone would"),
        (ES_HEADER + "a,10,resnet50,1,1,20000,1,v100,0\n", "2: epochs 20000: the job alone would"),
        (PHILLY_HEADER + "2017-10-03,1e300,1,60,x\n", "2: duration 1e+300: the job alone would"),
        (PHILLY_HEADER + "2017-10-03,31600000,1,60,x\n", "2: duration 3.16e+07: the job alone"),
        # a Pollux job's work is its application's run: only an absurd batch makes it too long
        (HEADER + "a,0,cifar10,1,100000000\n", "2: batch_size 1e+08: the job alone would"),
        (HEADER + "a,0,cifar10,4,1" + "0" * 300 + "\n", "2: batch_size 1e+300: the job alone"),
    ],
)
def test_a_job_longer_than_the_horizon(tmp_path, text, message):
    """A job that alone runs past the simulator's one-year horizon can never finish, and the
    simulation ran a round a tick to the horizon (epochs 1e300: ~30 min with one job)."""
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_workload(str(path))
    assert str(info.value).startswith(f"{path}:{message}")
    assert str(info.value).endswith("more than the simulator's horizon of 365 days")


@pytest.mark.parametrize("header", [b"", HEADER.encode()])
def test_binary_workload_file(tmp_path, header):
    """Was "'utf-8' codec can't decode byte", naming no file."""
    path = tmp_path / "w.csv"
    path.write_bytes(header + b"\xff\xfe\x00garbage\n")
    with pytest.raises(UserError, match=f"{path}: not UTF-8 text"):
        load_workload(str(path))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--policy", "lottery"], "unknown policy 'lottery'"),
        (["--cluster", "4x4xh100"], "unknown device kind 'h100'"),
        (["--spot", "half"], "bad --spot fraction"),
        (["--spot", "0.5:"], "bad --spot '0.5:': no revocation model after ':'"),  # was gce
        (["--workload", "pollux:99"], "no packaged Pollux workload"),
        # was "no packaged Pollux workload workload-.csv at load 1.0"
        (["--workload", "pollux:"], "bad Pollux workload 'pollux:': no workload number"),
        # NaN was 'cannot convert float NaN to integer'; --tick inf finished no job, exit 0
        (["--tick", "nan"], "--tick: invalid float value: 'nan' (a finite number)"),
        (["--tick", "inf"], "--tick: invalid float value: 'inf' (a finite number)"),
        (["--tick", "1e-6"], "--tick must be from 1 to 86,400 s, got 1e-06"),  # hung
        (["--cluster", "99999999x4xt4"], "399,999,996 GPUs, more than 100,000"),  # hung
        (["--restart-s", "nan"], "--restart-s: invalid float value: 'nan'"),  # was taken
        (["--rescale-s", "inf"], "--rescale-s: invalid float value: 'inf'"),  # never ended
        (
            ["--tick", "1e12"],
            "--tick must be from 1 to 86,400 s, got 1e+12",
        ),  # rounds at t=0: negative JCTs
        (["--restart-s", "1e300"], "--restart-s must be from 0 to 3,600 s, got 1e+300"),  # hung
        (["--rescale-s", "86400"], "--rescale-s must be from 0 to 3,600 s, got 86400"),  # hung
        (["--workload", "philly:999999999"], "philly:999999999: the trace has 82,247 jobs"),
        (["--compare", ",".join(["yarn-cs"] * 10000)], "--compare names 'yarn-cs' more than once"),
    ],
)
def test_cli_user_errors_are_one_line_exit_2(capsys, argv, message):
    try:
        code = main(["simulate", *argv])
    except SystemExit as exc:  # argparse refuses a flag's value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_bad_trace_row_exit_2(tmp_path, capsys):
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "a,-1,cifar10,2,128\n")
    assert main(["simulate", "--workload", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2:" in err and err.count("\n") == 1


def test_cli_writes_outputs_and_compares(tmp_path, capsys):
    path = tmp_path / "w.csv"
    rows = [f"j{i},{60 * i},ncf,{1 + i % 2},256" for i in range(6)]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    code = main(
        [
            "simulate",
            "--compare",
            "yarn-cs,shoal",
            "--workload",
            str(path),
            "--cluster",
            "2x4xt4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "yarn-cs" in printed and "shoal" in printed and "avg JCT" in printed
    for policy in ("yarn-cs", "shoal"):
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["finished"] == 6 and summary["total_cost_usd"] > 0
        assert (out / policy / "jobs.csv").read_text().count("\n") == 7
        assert (out / policy / "jct_cdf.png").stat().st_size > 0
        assert (out / policy / "gpus_in_use.png").stat().st_size > 0


def test_unknown_gpu_kind_in_easyscale_row(tmp_path):
    path = tmp_path / "es.csv"
    header = "name,time,application,max_parallelism,batch_size,epochs,"
    header += "enable_heterogeneous_deterministic,preferred_gpu,\n"
    path.write_text(header + "a,10,bert,4,8,1,1,v100,0\nb,20,bert,4,8,1,1,h100,0\n")
    with pytest.raises(UserError, match=f"{path}:3: unknown GPU kind 'h100'"):
        load_workload(str(path))


@pytest.mark.parametrize("compare", [[], ["--compare", "yarn-cs,shoal"]])
def test_cli_out_that_is_a_file_exit_2(tmp_path, capsys, compare):
    """Was a traceback (FileExistsError) after the whole simulation had run."""
    blocker = tmp_path / "file"
    blocker.write_text("kept")
    argv = ["simulate", *compare, "--workload", "philly:2", "--out", str(blocker)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot write to --out '{blocker}" in err and err.count("\n") == 1
    assert blocker.read_text() == "kept"


# -- defects found by the exploratory tester (session 17) -----------------------------------


@pytest.mark.parametrize(
    "rows, line, name",
    [
        ("j1,0,cifar10,2,128\nj1,5,cifar10,2,128\n", 3, "j1"),
        # a row without a name is called job-LINE: a row named so is a repeat too
        ("job-3,0,cifar10,2,128\n,5,cifar10,2,128\n", 3, "job-3"),
    ],
)
def test_a_repeated_pollux_job_name(tmp_path, rows, line, name):
    """Was exit 0 with one job fewer in the results, the phantom still holding GPUs."""
    path = tmp_path / "dup.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(UserError, match=f"{path}:{line}: job name '{name}' repeats line 2"):
        load_workload(str(path))


@pytest.mark.parametrize(
    "text, message",
    [
        (HEADER + "a,0,ncf,1,256\nb,31622400,ncf,1,256\n", "3: time 3.16224e+07: the job arrives"),
        (HEADER + "a,0,ncf,1,256\nb,1e300,ncf,1,256\n", "3: time 1e+300: the job arrives"),
        (ES_HEADER + "a,31536000,bert,4,8,1,1,v100,0\n", "2: time 3.1536e+07: the job arrives"),
        (
            PHILLY_HEADER + "2017-10-03 01:00:00,60,1,60,x\n2018-12-03 01:00:00,60,1,60,x\n",
            "3: timestamp 2018-12-03 01:00:00: the job arrives 426 days",
        ),
    ],
)
def test_a_job_arriving_after_the_horizon(tmp_path, text, message):
    """Was exit 0: the job vanished from the results (an arrival of 1e300 s: makespan 1e300)."""
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_workload(str(path))
    assert str(info.value).startswith(f"{path}:{message}")
    assert str(info.value).endswith("not before the simulator's horizon of 365 days")


@pytest.mark.parametrize("header", [HEADER, ES_HEADER, PHILLY_HEADER])
def test_a_workload_of_only_a_header(tmp_path, header):
    """Pollux and EasyScale ran 0 jobs, exit 0; Philly was an IndexError traceback."""
    path = tmp_path / "w.csv"
    path.write_text(header + "\n")
    with pytest.raises(UserError, match=f"^{path}: no jobs$"):
        load_workload(str(path))


def test_easyscale_row_without_a_name(tmp_path):
    """Was a KeyError traceback."""
    path = tmp_path / "es.csv"
    path.write_text(ES_HEADER.removeprefix("name,") + "10,bert,4,8,1,1,v100,0\n")
    with pytest.raises(UserError, match=f"{path}:2: missing 'name' value"):
        load_workload(str(path))


@pytest.mark.parametrize(
    "header, row, name",
    [
        (HEADER, "j1,0,cifar10,2,128", "j1"),  # was job-2: the name column was lost
        (ES_HEADER, "a,10,bert,4,8,1,1,v100,0", "a"),  # was a KeyError
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1,66,x", "philly-2"),  # was 'bad timestamp'
    ],
)
def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path, header, row, name):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (header + row + "\n").encode())
    assert [j.name for j in load_workload(str(path))] == [name]


@pytest.mark.parametrize("gpus, ok", [("1.5", False), ("2.0", True), ("2", True)])
def test_philly_gpus_must_be_whole(tmp_path, gpus, ok):
    """1.5 GPUs silently became 1."""
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + f"2017-10-03,60,{gpus},60,x\n")
    if ok:
        assert [j.requested_gpus for j in load_workload(str(path))] == [2]
    else:
        with pytest.raises(UserError, match=f"{path}:2: bad or missing 'num_gpus' value '1.5'"):
            load_workload(str(path))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workload", "philly:5:1:9"], "bad Philly workload 'philly:5:1:9'"),  # ran philly:5:1
        (["--json"], "--json needs --scenario"),  # was ignored
        (["--json", "--list"], "--json needs --scenario"),
        (["--compare", ""], "--compare '' names an empty policy"),  # ran --policy
        (["--compare", "shoal,,pollux"], "--compare 'shoal,,pollux' names an empty policy"),
    ],
)
def test_cli_usage_errors_exit_2(capsys, argv, message):
    assert main(["simulate", "--cluster", "1x4xt4", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_workload_that_is_a_directory(tmp_path, capsys):
    """Was 'workload file not found'."""
    assert main(["simulate", "--workload", str(tmp_path)]) == 2
    assert f"workload {tmp_path} is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["yarn-cs", "tiresias"])
def test_cli_job_wider_than_the_cluster_under_a_gang_policy(tmp_path, capsys, policy):
    """Was exit 0 with the job never run (makespan 0, or the one-year horizon)."""
    path = tmp_path / "big.csv"
    path.write_text(HEADER + "j1,0,cifar10,1000,128\n")
    assert (
        main(["simulate", "--policy", policy, "--workload", str(path), "--cluster", "2x4xt4"]) == 2
    )
    err = capsys.readouterr().err
    assert "gang job j1 needs 1000 GPUs; the cluster has 8" in err and err.count("\n") == 1


def _four_cifar(tmp_path):
    path = tmp_path / "four.csv"
    path.write_text(HEADER + "".join(f"j{i},0,cifar10,1,128\n" for i in range(4)))
    return str(path)


def test_spot_nodes_of_the_cluster_spec_are_revoked_without_spot_flag(tmp_path):
    """--cluster NxGxKIND:spot without --spot was revoked by no model (--help: default gce)."""
    workload = _four_cifar(tmp_path)
    default = simulate("yarn-cs", workload, "4x1xk80:spot")
    assert default["revoked_nodes"] > 0
    assert default == simulate("yarn-cs", workload, "4x1xk80:spot", "0:gce")
    assert simulate("yarn-cs", workload, "4x1xk80:spot", "0:none")["revoked_nodes"] == 0


@pytest.mark.parametrize("spot, warned", [("0.2", True), ("0.25", False), ("0", False)])
def test_a_spot_fraction_that_buys_no_node_warns(tmp_path, capsys, spot, warned):
    """0.2 of 2 nodes rounds to 0: the run had no spot at all, silently (0.25: 0.5, half up)."""
    argv = ["simulate", "--workload", _four_cifar(tmp_path), "--cluster", "2x4xv100,2x4xt4"]
    assert main([*argv, "--spot", f"{spot}:none"]) == 0
    err = capsys.readouterr().err
    if warned:
        assert err == "shoal: warning: --spot 0.2 buys no spot node in 2x4xv100, 2x4xt4 " + (
            "(the fraction of its node count rounds to 0)\n"
        )
    else:
        assert err == ""


@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory no file can be created in (chmod; as root, the immutable attribute)."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    immutable = False
    try:
        if os.access(d, os.W_OK):  # root ignores the mode
            immutable = (
                subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
            )
            if not immutable:
                pytest.skip("cannot make a directory unwritable here")
        yield d
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], check=True)
        d.chmod(0o755)


def test_cli_out_that_cannot_be_written_fails_before_work(unwritable_dir, capsys, monkeypatch):
    """Was a PermissionError traceback after the whole simulation."""
    import shoal.sim.run as run

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr(run, "Simulator", no_simulation)
    argv = ["simulate", "--workload", "philly:5:1", "--cluster", "2x4xt4"]
    assert main([*argv, "--out", str(unwritable_dir)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write to --out '{unwritable_dir}'" in err and err.count("\n") == 1
    assert list(unwritable_dir.iterdir()) == []


def test_cli_write_error_is_one_line(tmp_path, capsys):
    """An OSError while writing (here a directory where jobs.csv goes) was a traceback."""
    (tmp_path / "jobs.csv").mkdir()
    argv = ["simulate", "--workload", "philly:2", "--cluster", "2x4xt4", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot write to --out '{tmp_path}': {tmp_path / 'jobs.csv'}: Is a directory" in err
    assert err.count("\n") == 1


def test_cli_no_plots_removes_the_plots_of_an_earlier_run(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["simulate", "--workload", "philly:2", "--cluster", "2x4xt4", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "jct_cdf.png").is_file() and (out / "gpus_in_use.png").is_file()
    (out / "mine.png").write_text("not ours")
    assert main([*argv, "--no-plots"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["jobs.csv", "mine.png", "summary.json"]


def test_a_field_past_the_csv_limit_is_one_line(tmp_path, capsys):
    # csv's "field larger than field limit" was a traceback (csv.Error is no ValueError)
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "ok,1,ncf,1,256\n" + "a,1,ncf,1," + "9" * 200_000 + "\n")
    assert main(["simulate", "--workload", str(path), "--cluster", "1x4xt4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"shoal: error: {path}:3: not CSV (field larger than field limit")


@pytest.mark.parametrize("header", [HEADER, "timestamp,duration,num_gpus,gpu_time,cluster\n"])
def test_an_unreadable_workload_file_is_one_line(tmp_path, capsys, monkeypatch, header):
    # a file that cannot be read (no permission, an I/O error) was an OSError traceback: at the
    # header's read, or at the rows' (open() fails here once the header was read)
    path = tmp_path / "w.csv"
    path.write_text(header + "a,1,ncf,1,256\n")
    real_open, opened = type(path).open, []

    def failing_open(self, *args, **kwargs):
        opened.append(self)
        if self == path and len(opened) > (0 if header == HEADER else 1):
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "open", failing_open)
    assert main(["simulate", "--workload", str(path), "--cluster", "1x4xt4"]) == 2
    assert capsys.readouterr().err == f"shoal: error: {path}: cannot read (Permission denied)\n"
