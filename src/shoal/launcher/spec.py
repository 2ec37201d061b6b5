"""`shoal run`: one worker process per (emulated) device on this machine, kept training through
kills, notices and joins.

The launcher checks the job and flags before starting anything (bad input is one line and
exit code 2). It then acts as the controller of an elastic group: it hosts the rendezvous
TCPStore on 127.0.0.1, starts workers (`python -m shoal.worker`) with their device kind and
the slowdown that makes a CPU process run at that kind's speed relative to the fastest kind
(from the catalog's measured throughputs), injects the `--events`, watches the processes, and
publishes each new generation of the group when its membership changes (see
`shoal.runtime.membership` for the protocol; `generations.py` for the decisions).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import socket
import sys
import tempfile
from dataclasses import dataclass, field

from shoal.config import RunConfig
from shoal.errors import UserError, user_code_error
from shoal.job import Job, build_job, load_job_file, parse_options
from shoal.launcher.events import Event, named
from shoal.perf.devices import load_devices
from shoal.plan import plan_micro_batches
from shoal.runtime.batching import check_batch, policy_for
from shoal.runtime.outputs import prepare_out_dir


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RunSpec:
    """A local run: the workers' shared configuration, their device kinds, injected events."""

    config: RunConfig
    kinds: list[str]
    events: list[Event] = field(default_factory=list)
    tiers: list[str] = field(default_factory=list)  # per worker, with --provider (else on_demand)

    def worker_config(self, slowdown: float) -> RunConfig:
        """What a worker of a kind `slowdown` times slower than the fastest is handed."""
        emulation = dataclasses.replace(self.config.emulation, slowdown=slowdown)
        return dataclasses.replace(self.config, emulation=emulation)


@dataclass(frozen=True)
class Speeds:
    """Per device kind: emulation slowdown (>= 1) and prior time per micro-batch."""

    slowdown: dict[str, float]
    prior: dict[str, float]


def local_worker_limit() -> int:
    """How many worker processes `shoal run` starts on this machine at most: each is a Python
    process with torch loaded (hundreds on a laptop's cores would only thrash)."""
    return max(16, 8 * len(os.sched_getaffinity(0)))


def check_local_processes(flag: str, count: int) -> None:
    """A flag that asks for `count` processes on this machine: at most `local_worker_limit`."""
    limit = local_worker_limit()
    if count > limit:
        cores = len(os.sched_getaffinity(0))
        raise UserError(f"{flag} {count}: at most {limit} local processes on {cores} CPU cores")


def check_process_count(spec: RunSpec) -> None:
    """The initial workers start at once; an autoscaled run may hold --max-servers of them
    (--events' adds wait for a process to end past the limit: the controller)."""
    limit = local_worker_limit()
    if len(spec.kinds) > limit:
        raise UserError(
            f"--workers starts {len(spec.kinds)} local worker processes at once, more than "
            f"{limit} on {len(os.sched_getaffinity(0))} CPU cores (use torchrun across machines)"
        )
    provider = spec.config.provider
    if provider.name and len(spec.kinds) > provider.max_servers:  # "at most N at once"
        raise UserError(
            f"--workers buys {len(spec.kinds)} servers, more than --max-servers "
            f"{provider.max_servers}"
        )
    if provider.name and provider.autoscale:
        check_local_processes("--max-servers", provider.max_servers)


def check_run(spec: RunSpec) -> tuple[Speeds, Job]:
    """Validate everything a worker would trip on, before any process starts. Returns the
    speeds and the job it built (the rest of the launch takes it: the job file's code runs
    once)."""
    config = spec.config  # its own fields are checked already (RunConfig.__post_init__)
    if not spec.kinds:
        raise UserError("--workers names no worker")
    check_process_count(spec)
    job = check_job(config)
    if config.max_micro_batches is not None:  # the planner's own check, before any worker starts
        try:
            caps = [config.max_micro_batches] * len(spec.kinds)
            plan_micro_batches(job.num_micro_batches, [1.0] * len(spec.kinds), caps)
        except UserError as exc:
            raise UserError(f"--max-micro-batches {config.max_micro_batches}: {exc}") from None
    if config.resume and not config.checkpoint.dir and not pathlib.Path(config.out).is_dir():
        raise UserError(f"--resume {config.out}: no such run directory")  # not created empty
    out = prepare_out_dir(config.out)
    ckpts = pathlib.Path(config.checkpoint.dir or out / "checkpoints")
    has_ckpt = ckpts.is_dir() and any(ckpts.glob("ckpt-*.json"))
    if has_ckpt and not config.resume:
        raise UserError(
            f"{out} already holds checkpoints of a run: pass --resume to continue "
            "it, or choose another --out"
        )
    if config.resume and not has_ckpt:
        raise UserError(f"--resume: no checkpoint found in {ckpts}")
    devices = load_devices()
    kinds = set(spec.kinds) | {e.kind for e in spec.events if e.kind}
    kinds |= {devices.check(k) for k in config.provider.kind_list}  # what a scaler may buy
    speed = {k: devices.workload_speed(devices.kind(k).name, job.workload) for k in kinds}
    fastest = max(speed.values())
    speeds = Speeds(
        {k: fastest / s for k, s in speed.items()}, {k: 1.0 / s for k, s in speed.items()}
    )
    return speeds, job


def check_job(config: RunConfig):
    """The job built as a worker builds it, and the flags only the job can judge (its batch
    policy, the slow links), and the checkpoint storage: refused before any worker starts, by
    `shoal run` and `shoal torchrun` alike. Returns the job."""
    job = load_job(config)
    check_batch(config.batch, job, config.consistency)
    check_slow_link(config, job)
    check_storage(config.checkpoint.dir)
    return job


def check_slow_link(config: RunConfig, job) -> None:
    """The slow-link flags against the rest of the run: an adaptive batch policy (the flag's or
    the job's) is refused with --compress or --local-steps; --sites alone, which changes
    nothing, is warned about (as --batch-reference with jabas is), and so is the lazy
    step where the job's optimizer has none (the workers fall back to the dense step)."""
    link = config.link
    policy = policy_for(config.batch, job, config.consistency).name
    source = "--batch-policy" if config.batch.policy else "the job's batch_policy"
    link.check_batch_policy(policy, source)
    if link.sites is not None and link.compress == "none" and link.local_steps is None:
        sys.stderr.write(
            "shoal: warning: --sites has no effect without --compress or --local-steps\n"
        )
    if link.compress != "none" and link.effective_sparse_optim == "lazy":  # the workers' own test
        from shoal.runtime.built import built_model, built_optimizer
        from shoal.runtime.sparse_optim import supports

        reason = supports(built_optimizer(job, built_model(job, "cpu")))
        if reason is not None:
            sys.stderr.write(f"shoal: warning: --sparse-optim lazy has no effect: {reason}\n")


def load_job(config: RunConfig):
    """The job, built as a worker will build it; an exception in the job file's own code (a
    syntax error, a failed import, a `make_job` that raises) is one line naming its file and
    line, since every worker would hit it too."""
    try:
        return build_job(load_job_file(config.job), parse_options(config.options), config.seed)
    except UserError:
        raise
    except Exception as exc:
        raise user_code_error(exc) from exc


def check_storage(url: str | None) -> None:
    """An fsspec URL's filesystem must be installed here before any worker needs it; a local
    directory must not be (or lie under) a file, and must take a file (not read-only), or the
    first checkpoint would fail the run (the check creates nothing: its probe is unnamed)."""
    if not url:
        return
    if "://" not in url:
        path = pathlib.Path(url)
        while not path.exists() and path != path.parent:
            path = path.parent
        if not path.is_dir():
            raise UserError(f"--checkpoint-dir {url}: {path} is not a directory")
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            raise UserError(f"cannot write to --checkpoint-dir {url!r}: {exc.strerror}") from None
        return
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--checkpoint-dir {url}: {message}") from None


def unreachable_events(spec: RunSpec) -> list[Event]:
    """Events that can never fire: a step the run ends before, or a worker never started
    (workers are numbered in order of creation: the initial ones, then each `add`)."""
    created = len(spec.kinds) + sum(e.action == "add" for e in spec.events)
    return [
        e
        for e in spec.events
        if (e.step is not None and e.step >= spec.config.steps)
        or (e.worker not in (None, "random") and int(e.worker[1:]) >= created)
    ]


def run_local(spec: RunSpec, show_progress: bool = True, verbose: bool = False) -> dict:
    from shoal.launcher.rundir import run_in_directory
    from shoal.launcher.supervisor import Controller

    with no_new_folder_left_on_refusal(spec.config.out):
        speeds, job = check_run(spec)
        spec = with_implied_reference(spec)
        never = unreachable_events(spec)
        if never:  # one line, however many
            sys.stderr.write(f"shoal: warning: {named(never)} can never fire\n")
        # and not queued: a step event due at --steps was tried once the workers had gone
        spec = dataclasses.replace(spec, events=[e for e in spec.events if e not in never])
        driver = provider_driver(spec, speeds, job)
    # the directory's lock, a resume's checks, and nothing destroyed: rundir.py
    run = lambda: Controller(spec, speeds, show_progress, verbose, driver).run()  # noqa: E731
    return run_in_directory(spec.config, run, job)


@contextlib.contextmanager
def no_new_folder_left_on_refusal(out: str):
    """check_run makes --out (and its missing parents) to check it can be written; a refusal
    after that (a provider flag, an impossible goal) removes what it made while still empty."""
    made = []
    for path in (pathlib.Path(out), *pathlib.Path(out).parents):
        if path.exists():
            break
        made.append(path)
    try:
        yield
    except UserError:
        for path in made:  # the deepest first
            try:
                path.rmdir()  # only an empty folder
            except OSError:
                break
        raise


def with_implied_reference(spec: RunSpec) -> RunSpec:
    """The run with `shoal run`'s default --batch-reference, its workers' kinds (the throughput
    model of pollux and shoal: these workers' priors), set after check_run: a reference given
    with a policy that weighs no throughput is warned about, one implied is not."""
    batch = spec.config.batch
    if batch.reference is not None or not spec.kinds:
        return spec
    batch = dataclasses.replace(batch, reference=",".join(spec.kinds))
    return dataclasses.replace(spec, config=dataclasses.replace(spec.config, batch=batch))


def provider_driver(spec: RunSpec, speeds: Speeds, job: Job):
    """With `--provider`: check the provider and the goal (timing a few micro-batches of `job`,
    as check_run built it, on this host, the speed an impossible deadline is judged by) and
    return what builds the controller's `autoscale.Driver`; None without a provider."""
    if not spec.config.provider.name:
        return None
    from shoal.cluster.provider import provider_from_config
    from shoal.launcher.autoscale import Driver, check_provider
    from shoal.launcher.hostspeed import estimate_host_s

    provider_from_config(spec.config.provider)  # an unknown kind, a bad trace: nothing timed yet
    host_s = estimate_host_s(job, spec.config) if spec.config.provider.autoscale else None
    check_provider(spec, speeds, job, host_s)
    return lambda ctl: Driver(spec, speeds, host_s, job, ctl)
