"""A local run's spec: each worker is handed the run's configuration with its own slowdown, and
the checks made before any worker starts."""

import dataclasses
import pathlib

import pytest

from shoal.cli import main
from shoal.config import CheckpointConfig, EmulationConfig, RunConfig, SlowLinkConfig
from shoal.errors import UserError
from shoal.launcher.spec import RunSpec, check_run, check_slow_link, load_job


def test_worker_config_changes_only_the_slowdown():
    config = RunConfig(
        "job.py",
        9,
        "out",
        checkpoint=CheckpointConfig(every=2),
        emulation=EmulationConfig(slowdown=1.0, host_s=0.01),
    )
    spec = RunSpec(config, ["v100", "k80"])
    slow = spec.worker_config(3.5)
    assert slow.emulation == EmulationConfig(slowdown=3.5, host_s=0.01)
    assert RunConfig.from_json(slow.to_json()) == slow
    assert slow.checkpoint == config.checkpoint and slow.steps == 9
    assert spec.config.emulation.slowdown == 1.0  # the shared configuration is untouched


# -- the slow-link flags against the rest of the run, before any worker starts ------------------

DIGITS = str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py")


@pytest.mark.parametrize(
    "flags, mode",
    [
        (["--sites", "0/1", "--compress", "topk:0.1"], "--compress"),
        (["--local-steps", "2"], "--local-steps"),
    ],
)
def test_an_adaptive_batch_policy_across_slow_links_is_refused_before_any_worker(
    tmp_path, capsys, flags, mode
):
    """The workers refused it, after "starting 2 workers", with tracebacks in their logs."""
    out = tmp_path / "out"
    argv = ["run", DIGITS, "--workers", "2xk80", "--steps", "3", "--out", str(out)]
    code = main([*argv, *flags, "--batch-policy", "jabas"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        f"shoal: error: --batch-policy jabas is adaptive: {mode} needs a fixed batch size"
    ]
    assert not (out / "logs").exists()  # no worker was started


def test_the_jobs_own_adaptive_policy_is_refused_with_compress(tmp_path):
    config = RunConfig(DIGITS, 3, str(tmp_path), link=SlowLinkConfig(compress="topk:0.1"))
    job = dataclasses.replace(load_job(config), batch_policy="jabas")
    with pytest.raises(UserError, match="the job's batch_policy jabas is adaptive: --compress"):
        check_slow_link(config, job)
    check_slow_link(config, load_job(config))  # digits.py's own: fixed


@pytest.mark.parametrize(
    "link, warned",
    [
        (SlowLinkConfig(sites="0/1"), True),
        (SlowLinkConfig(sites="0/1", compress="topk:0.1"), False),
        (SlowLinkConfig(sites="0/1", local_steps=2), False),
        (SlowLinkConfig(), False),
    ],
)
def test_sites_without_a_way_across_the_links_is_warned_about(tmp_path, capsys, link, warned):
    check_run(RunSpec(RunConfig(DIGITS, 3, str(tmp_path / "run"), link=link), ["k80", "k80"]))
    err = capsys.readouterr().err
    warning = "shoal: warning: --sites has no effect without --compress or --local-steps\n"
    assert err == (warning if warned else "")


def test_a_lazy_step_the_optimizer_cannot_take_is_warned_about_at_launch(tmp_path, capsys):
    """The workers fell back to the dense step with a warning in their logs only."""
    import torch

    config = RunConfig(DIGITS, 3, str(tmp_path), link=SlowLinkConfig(compress="topk:0.1"))
    job = load_job(config)
    check_slow_link(config, job)  # digits.py's SGD has a lazy step
    assert capsys.readouterr().err == ""
    rmsprop = dataclasses.replace(job, optimizer=lambda p: torch.optim.RMSprop(p, lr=0.01))
    check_slow_link(config, rmsprop)
    assert "--sparse-optim lazy has no effect: a lazy step for SGD, Adam and AdamW only" in (
        capsys.readouterr().err
    )
    dense = dataclasses.replace(
        config, link=SlowLinkConfig(compress="topk:0.1", sparse_optim="dense")
    )
    check_slow_link(dense, rmsprop)
    assert capsys.readouterr().err == ""
