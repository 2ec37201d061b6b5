"""Real subprocess trials and the `shoal tune` command line (tiny models, one step each)."""

import json
import subprocess
import sys

import pytest

from shoal.cli import main
from shoal.tune import TrialOutcome, TrialSpec, run_trial

TINY = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64, "block_size": 16}


@pytest.mark.dist
def test_tensor_parallel_trial_on_two_gloo_ranks():
    spec = TrialSpec(
        model_config=TINY,
        micro_batch_size=2,
        seq_len=8,
        ckpt_ratio=1.0,
        fusion=True,
        world_size=2,
        steps=1,
        warmup_steps=0,
        threads=1,
    )
    out = run_trial(spec, memory_cap_mb=100_000, timeout_s=240)
    assert out.status == "ok", out.detail
    assert out.samples_per_s > 0 and out.cpu_time_s > 0
    assert 20 < out.peak_memory_mb < 100_000


@pytest.mark.slow  # starts a trial process
def test_trial_over_the_cap_is_killed_and_reported():
    spec = TrialSpec(model_config=TINY, micro_batch_size=1, seq_len=8, steps=1, threads=1)
    out = run_trial(spec, memory_cap_mb=1.0)
    assert out.status == "over_cap"
    assert out.samples_per_s is None and "cap" in out.detail


@pytest.mark.dist
def test_a_failed_rank_s_error_is_the_trial_s_error():
    """It was only "2 rank(s) failed, exit codes [1, 1]". A spec `tune` refuses up front (the
    GPT schedule cannot shard a model without biases) stands for any error in the ranks."""
    cfg = {**TINY, "bias": False}
    spec = TrialSpec(model_config=cfg, seq_len=8, world_size=2, steps=1, warmup_steps=0, threads=1)
    out = run_trial(spec, memory_cap_mb=None, timeout_s=240)
    assert out.status == "error"
    assert "rank 0 of 2 failed: ValueError: the GPT schedule shards biases" in out.detail


@pytest.mark.slow  # starts a trial process
def test_failing_trial_is_an_error_with_the_message():
    spec = TrialSpec(model_config={"n_layer": 1}, seq_len=8, steps=1, threads=1)
    spec = TrialSpec.from_json(spec.to_json().replace('"n_layer": 1', '"n_layers": 1'))
    out = run_trial(spec, memory_cap_mb=None, timeout_s=120)
    assert out.status == "error"
    assert "n_layers" in out.detail


@pytest.mark.slow  # starts a trial process
def test_cli_tunes_a_checkpointed_trial_and_writes_it(tmp_path, capsys):
    # One real trial (process start-up dominates): GPT with every block checkpointed.
    db = tmp_path / "tune.json"
    cfg = [arg for k, v in TINY.items() for arg in ("--config", f"{k}={v}")]
    code = main(
        ["tune", "--memory-cap-mb", "100000", "--trials", "1", "--batch-sizes", "2",
         "--ckpt-ratios", "1", "--fusion", "off", "--seq-len", "8", "--steps", "1",
         "--warmup-steps", "0", "--threads", "1", "--out", str(db), *cfg]
    )  # fmt: skip
    assert code == 0
    assert "best: micro_batch_size=2 ckpt_ratio=1.0" in capsys.readouterr().out
    saved = json.loads(db.read_text())
    (trial,) = saved["trials"]
    assert trial["status"] == "ok" and saved["best"] == trial
    assert trial["samples_per_s"] > 0 and trial["step_time_s"] > 0
    # A real process holding torch is at least tens of MiB resident.
    assert 20 < trial["peak_memory_mb"] < 100_000


@pytest.mark.parametrize(
    "argv",
    [
        ["--memory-cap-mb", "0"],
        ["--memory-cap-mb", "100", "--batch-sizes", "two"],
        ["--memory-cap-mb", "100", "--fusion", "maybe"],
        ["--memory-cap-mb", "100", "--config", "n_layer"],
        ["--memory-cap-mb", "100", "--config", "n_embed=64"],
        ["--memory-cap-mb", "100", "--ckpt-ratios", "2"],
        ["--memory-cap-mb", "100", "--timeout-s", "0"],
        ["--model", "resnet", "--memory-cap-mb", "100"],
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, capsys):
    try:
        code = main(["tune", *argv])
    except SystemExit as exc:  # argparse rejects unknown choices itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shoal: error:") and "\n" not in err


@pytest.mark.parametrize(
    "extra, needle",
    [
        # NaN was taken and every trial then measured against it
        (["--memory-cap-mb", "nan"], "--memory-cap-mb: invalid float value: 'nan'"),
        (["--timeout-s", "nan"], "--timeout-s: invalid float value: 'nan'"),
        (["--memory-cap-mb", "0"], "memory cap must be > 0 MiB, got 0"),
        (["--timeout-s", "-1"], "--timeout-s must be > 0, got -1"),
        (["--threads", "-1"], "threads must be >= 0 (0: auto), got -1"),  # each trial failed
        # was "'<' not supported between instances of 'str' and 'int'", naming no flag
        (["--config", "n_layer=abc"], "--config n_layer=abc: GPTConfig.n_layer must be an integer"),
        # every trial forked a billion torch processes (each under the cap, not their sum)
        (["--world-size", "1000000000"], "--world-size 1000000000: at most"),
        # a RecursionError traceback; Python's words about sys.set_int_max_str_digits
        (["--config", "n_layer=" + "[" * 100_000], "[[[...: nested too deeply\n"),
        (["--config", "n_layer=" + "9" * 5000], ": an integer of more than 4,300 digits\n"),
    ],
)
def test_cli_bad_values_name_the_flag(extra, needle, capsys):
    argv = ["tune", "--memory-cap-mb", "100", *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "extra, limit",
    [
        # docs/tune.md's command without its --config block_size=256
        (["--seq-len", "256"], "gpt2's block_size of 64"),
        (["--seq-len", "256", "--config", "block_size=128"], "gpt2's block_size of 128"),
        (["--model", "bert", "--seq-len", "65"], "bert's max_position of 64"),
        (["--model", "llama", "--seq-len", "128"], "llama's max_seq_len of 64"),
    ],
)
def test_cli_seq_len_above_the_model_limit_is_refused_before_any_trial(
    extra, limit, capsys, monkeypatch
):
    """Every trial failed inside the model (IndexError; LLaMA: RuntimeError), then exit 1."""

    def no_trial(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("shoal.tune.run_trial", no_trial)
    assert main(["tune", "--memory-cap-mb", "100", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shoal: error: --seq-len ") and limit in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "extra, needle",
    [
        # vocab_size=1.5 failed every trial inside torch.empty, then "no configuration fits"
        (
            ["--config", "vocab_size=1.5"],
            "--config vocab_size=1.5: GPTConfig.vocab_size must be an integer, got 1.5",
        ),
        # "'<=' not supported between instances of 'float' and 'str'"
        (
            ["--config", "dropout=abc"],
            "--config dropout=abc: GPTConfig.dropout must be a number, got 'abc'",
        ),
        (
            ["--model", "llama", "--config", "n_layers=2.0"],
            "LlamaConfig.n_layers must be an integer, got 2.0",
        ),
        # every trial's ranks failed with "2 rank(s) failed, exit codes [1, 1]", then exit 1
        (
            ["--world-size", "2", "--config", "bias=false"],
            "--model gpt2 --world-size 2: the GPT schedule shards biases",
        ),
        # the next three shared "world_size and steps must be >= 1, warmup_steps >= 0"
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--warmup-steps", "-1"], "--warmup-steps must be >= 0, got -1"),
        (["--world-size", "0"], "--world-size must be >= 1, got 0"),
        (["--seed", "-1"], "--seed must be in [0, 2**32 - 1], got -1"),  # was numpy's "Seed must"
        (["--seed", str(2**32)], "--seed must be in [0, 2**32 - 1], got 4294967296"),
        # each trial's torch pool crashed (SIGSEGV), reported as a warning line, then exit 1
        (["--threads", "100000"], "--threads 100000: at most "),
        (["--threads", "-1"], "--threads must be >= 0 (0: auto), got -1"),  # was "threads must"
        (["--seq-len", "1"], "--seq-len must be >= 2, got 1"),  # was "seq_len must"
    ],
)
def test_cli_bad_trial_input_is_refused_before_any_trial(extra, needle, capsys, monkeypatch):
    def no_trial(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("shoal.tune.run_trial", no_trial)
    assert main(["tune", "--memory-cap-mb", "100", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shoal: error: ") and needle in err and err.count("\n") == 1


def test_cli_cuda_without_cuda_is_refused_before_any_trial(capsys, monkeypatch):
    """Every trial failed with "Torch not compiled with CUDA enabled", then exit 1."""

    def no_trial(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("shoal.tune.run_trial", no_trial)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["tune", "--memory-cap-mb", "100", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == "shoal: error: --device cuda: CUDA is not available\n"


def test_cli_gpt_without_biases_runs_checkpointed_trials_on_one_rank(capsys, monkeypatch):
    """At world size 1 nothing is sharded: bias=false is no reason to refuse."""
    ran = []

    def fake_trial(spec, memory_cap_mb=None, timeout_s=600.0):
        ran.append((spec.ckpt_ratio, spec.model_config["bias"]))
        return TrialOutcome("ok", samples_per_s=1.0, step_time_s=1.0, peak_memory_mb=1.0)

    monkeypatch.setattr("shoal.tune.run_trial", fake_trial)
    argv = ["--batch-sizes", "1", "--ckpt-ratios", "0,0.5", "--fusion", "off", "--trials", "2"]
    assert main(["tune", "--memory-cap-mb", "100", "--config", "bias=false", *argv]) == 0
    assert sorted(ran) == [(0.0, False), (0.5, False)]


def test_cli_seq_len_at_the_model_limit_runs_its_trials(capsys, monkeypatch):
    ran = []

    def fake_trial(spec, memory_cap_mb=None, timeout_s=600.0):
        ran.append(spec.seq_len)
        return TrialOutcome("ok", samples_per_s=1.0, step_time_s=1.0, peak_memory_mb=1.0)

    monkeypatch.setattr("shoal.tune.run_trial", fake_trial)
    argv = ["--batch-sizes", "1", "--ckpt-ratios", "0", "--fusion", "off", "--trials", "1"]
    assert main(["tune", "--memory-cap-mb", "100", "--seq-len", "64", *argv]) == 0
    assert ran == [64] and "best: micro_batch_size=1" in capsys.readouterr().out


def test_cli_nothing_fits_says_what_each_trial_ended_as(capsys, monkeypatch):
    """It said "no configuration fits under 100 MiB" when no trial had run to the end."""
    ends = iter(["timeout", "error", "timeout"])

    def fake_trial(spec, memory_cap_mb=None, timeout_s=600.0):
        return TrialOutcome(next(ends))

    monkeypatch.setattr("shoal.tune.run_trial", fake_trial)
    argv = ["--batch-sizes", "1", "--ckpt-ratios", "0,0.5,1", "--fusion", "off", "--trials", "3"]
    assert main(["tune", "--memory-cap-mb", "100", *argv]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "no configuration fits under 100 MiB (1 error, 2 timeout)"


def test_a_crashed_trial_names_its_signal(tmp_path, monkeypatch):
    """A trial killed by a signal may write nothing to stderr: its detail was the last line there
    whatever it was (Python's warning about how the trial module was started)."""
    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\necho 'an unrelated line' >&2\nkill -SEGV $$\n")
    crash.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(crash))
    out = run_trial(TrialSpec(model_config=TINY, steps=1), memory_cap_mb=None, timeout_s=60)
    assert (out.status, out.detail) == ("error", "killed by SIGSEGV")


def test_the_trial_entry_point_writes_no_warning():
    run = subprocess.run([sys.executable, "-m", "shoal.tune"], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr == "usage: python -m shoal.tune '<TrialSpec json>'\n"


@pytest.mark.parametrize("under", [True, False])
def test_cli_out_that_cannot_be_written_is_refused_before_any_trial(tmp_path, capsys, under):
    """A file in its place was a traceback after every trial had run."""
    blocker = tmp_path / "file"
    blocker.write_text("kept")
    out = blocker / "trials.json" if under else tmp_path
    assert main(["tune", "--memory-cap-mb", "100", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out if not under else blocker) in err and err.count("\n") == 1
    assert blocker.read_text() == "kept"


@pytest.mark.parametrize("value", ["1e400", "-1e999", "[1, 1e400]"])
def test_cli_config_number_past_a_floats_range_is_refused(value, capsys):
    """llama's rope_theta=1e400 was taken as inf (its own check lets it through); the words
    Infinity and NaN, which JSON's reader takes, are left to the model's checks."""
    from shoal.cli.tune import parse_overrides

    argv = ["tune", "--model", "llama", "--memory-cap-mb", "100", "--timeout-s", "0"]
    assert main([*argv, "--config", f"rope_theta={value}"]) == 2
    err = capsys.readouterr().err
    expected = f"--config rope_theta={value}: a number out of range (a float's limit is 1.8e308)"
    assert err == f"shoal: error: {expected}\n"
    assert parse_overrides(["x=Infinity", "y=1e308"]) == {"x": float("inf"), "y": 1e308}
