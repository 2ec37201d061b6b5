"""The typed run configuration: it reaches a worker unchanged, and bad values are one line."""

import argparse
import dataclasses

import pytest

from shoal.cli.flags import add_flags, from_args
from shoal.cli.run import RUN_OVERRIDES, config_from_args
from shoal.config import CheckpointConfig, EmulationConfig, LaunchConfig, RunConfig
from shoal.errors import UserError
from shoal.launcher.torchrun import parse_config

FULL = RunConfig(
    "job.py",
    7,
    "/tmp/run",
    consistency="fast",
    seed=3,
    options=("a=1", "b=x"),
    replan_every=2,
    max_micro_batches=4,
    threads=2,
    checkpoint=CheckpointConfig(every=3, seconds=1.5, dir="memory://ck"),
    resume=True,
    emulation=EmulationConfig(slowdown=2.5, host_s=0.004),
)


@pytest.mark.parametrize("config", [FULL, RunConfig("job.py", 1, "out")])
def test_round_trip_to_a_worker(config, monkeypatch):
    """What the supervisor sets in a worker's environment is what the worker entry reads."""
    for key, value in config.to_env().items():
        monkeypatch.setenv(key, value)
    assert parse_config([]) == config


def test_worker_flags_give_the_same_config(monkeypatch):
    """The torchrun entry's flags (generated from the fields) build the same configuration."""
    monkeypatch.delenv("SHOAL_CONFIG", raising=False)
    monkeypatch.setenv("SHOAL_SLOWDOWN", "2.5")
    monkeypatch.setenv("SHOAL_EMULATED_HOST_S", "0.004")
    argv = ["job.py", "--steps", "7", "--out", "/tmp/run", "--consistency", "fast", "--seed", "3",
            "-o", "a=1", "--option", "b=x", "--replan-every", "2", "--max-micro-batches", "4",
            "--threads", "2", "--checkpoint-every", "3", "--checkpoint-seconds", "1.5",
            "--checkpoint-dir", "memory://ck", "--resume"]  # fmt: skip
    assert parse_config(argv) == FULL


def _shoal_run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_flags(p, RunConfig, RUN_OVERRIDES)
    add_flags(p, LaunchConfig)
    return p


def test_shoal_run_resume_names_the_directory(monkeypatch):
    monkeypatch.delenv("SHOAL_SLOWDOWN", raising=False)
    monkeypatch.delenv("SHOAL_EMULATED_HOST_S", raising=False)
    args = _shoal_run_parser().parse_args(["j.py", "--workers", "v100", "--steps", "3",
                                           "--resume", "runs/a"])  # fmt: skip
    config = config_from_args(args)
    assert (config.out, config.resume) == ("runs/a", True)
    assert from_args(LaunchConfig, args) == LaunchConfig("v100")
    fresh = config_from_args(
        _shoal_run_parser().parse_args(["j.py", "--workers", "k80", "--steps", "3", "--out", "o"])
    )
    assert (fresh.out, fresh.resume) == ("o", False)


def test_resume_is_listed_once_in_help():
    options = _shoal_run_parser().format_help().split("options:")[1].splitlines()
    listed = [line for line in options if line.startswith("  --resume")]
    assert len(listed) == 1 and listed[0].startswith("  --resume DIR")


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"steps": 0}, "--steps must be >= 1, got 0"),
        ({"threads": 0}, "--threads must be >= 1, got 0"),
        ({"replan_every": 0}, "--replan-every must be >= 1, got 0"),
        ({"max_micro_batches": 0}, "--max-micro-batches must be >= 1, got 0"),
        ({"checkpoint": {"every": -1}}, "--checkpoint-every must be >= 0, got -1"),
        ({"checkpoint": {"seconds": float("nan")}}, "--checkpoint-seconds must be >= 0"),
        ({"checkpoint": {"keep": -1}}, "--checkpoint-keep must be >= 0, got -1"),
        ({"emulation": {"host_s": -3.0}}, "SHOAL_EMULATED_HOST_S must be > 0"),
        ({"emulation": {"slowdown": 0.5}}, "SHOAL_SLOWDOWN (slowdown) must be >= 1"),
    ],
)
def test_bad_values_are_one_line(change, needle):
    with pytest.raises(UserError) as exc:
        values = dataclasses.asdict(RunConfig("job.py", 1, "out"))
        for key, value in change.items():
            values[key] = {**values[key], **value} if isinstance(value, dict) else value
        values["checkpoint"] = CheckpointConfig(**values["checkpoint"])
        values["emulation"] = EmulationConfig(**values["emulation"])
        RunConfig(**values)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_unparsable_emulation_variable_names_it():
    with pytest.raises(UserError, match="SHOAL_EMULATED_HOST_S"):
        EmulationConfig.from_environ({"SHOAL_EMULATED_HOST_S": "fast"})
