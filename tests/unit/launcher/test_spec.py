"""A local run's spec: each worker is handed the run's configuration with its own slowdown."""

from shoal.config import CheckpointConfig, EmulationConfig, RunConfig
from shoal.launcher.spec import RunSpec


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
