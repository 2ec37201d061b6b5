"""Stand-ins for the autoscaling driver's tests (`launcher/autoscale.py` `Driver`): a driver
outside any controller, and a controller stand-in with two k80 members."""

import types

from shoal.config import ProviderConfig, RunConfig
from shoal.launcher.autoscale import Driver
from shoal.launcher.spec import RunSpec, Speeds
from shoal.metrics.training import StepLine, WorkerShare
from shoal_testing import DIGITS


def make_driver(host_s=0.01, out="unused", **provider):
    """A driver outside any controller: the launch-time check's configuration; `host_s` is the
    launcher's estimate of the host's seconds per micro-batch."""
    cfg = ProviderConfig(name="local", kinds="v100,k80", time_scale=10.0, **provider)
    spec = RunSpec(RunConfig(job=DIGITS, steps=100, out=str(out), provider=cfg), ["k80", "k80"],
                   tiers=["spot", "on_demand"])  # fmt: skip
    speeds = Speeds({"v100": 1.0, "k80": 3.0}, {"v100": 1.0, "k80": 3.0})
    job = types.SimpleNamespace(micro_batch_size=16, global_batch_size=64)
    return Driver(spec, speeds, host_s, job)


def two_k80_members(d, metrics, say):
    """`d`'s controller (a stand-in whose `spawn` makes workers that never exit), with two k80
    members on the initial servers and three measured steps; the controller is returned."""
    workers = {}

    def spawn(kind):
        w = types.SimpleNamespace(
            id=f"w{len(workers)}", state="starting", proc=types.SimpleNamespace(poll=lambda: None)
        )
        workers[w.id] = w
        return w

    logs = metrics.parent / "logs" / "attempt-1"  # the attempt's folder (its scenario's copy)
    logs.mkdir(parents=True, exist_ok=True)
    d.ctl = types.SimpleNamespace(
        t0=0.0, workers=workers, members=["w0", "w1"], pending=[], steps_done=5,
        metrics=metrics, say=say, spawn=spawn, logs=logs,
    )  # fmt: skip
    for _ in range(2):
        spawn("k80").state = "member"
    d.open_initial()
    shares = (WorkerShare("w0", 0, "k80", 2, 0.03), WorkerShare("w1", 1, "k80", 2, 0.03))
    for _ in range(3):
        d.observe(StepLine(step=0, global_batch_size=64, step_time_s=0.07, workers=shares))
    return d.ctl
