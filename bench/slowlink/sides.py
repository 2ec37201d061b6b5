"""The sides of `bench/slowlink_train.py`: what each one runs (its flags, its workers' command
line) and how one run of it is started on the test bed, its checkpoints kept as they appear."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import subprocess
import time

from shoal.config import SlowLinkConfig
from slowlink.testbed import WAN

ROOT = pathlib.Path(__file__).resolve().parents[2]
DDP_WORKER = ROOT / "bench" / "slowlink" / "ddp_train.py"


@dataclasses.dataclass(frozen=True)
class Model:
    job: str
    options: tuple[str, ...]
    steps: int  # per side (shoal-local: x --local-budget)
    eval_every: int


SIDES = (
    "ddp",
    "powersgd",
    "shoal-dense",
    "shoal-blocktopk",
    "shoal-blocktopk-pipe",
    "shoal-auto",
    "shoal-local",
    "shoal-local-overlap",  # the outer exchange under the next D inner steps
    "shoal-local-overlap-fast",  # the same, --consistency fast (a one-worker site sums nothing)
)


def side_argv(side: str, args) -> list[str] | None:
    """The side's extra flags, or None when this shoal lacks the flag (h15a's --compress)."""
    fields = {f.name for f in dataclasses.fields(SlowLinkConfig)}
    extra = {
        "ddp": [],
        "powersgd": ["--powersgd", str(args.powersgd_rank)],
        "shoal-dense": [],
        "shoal-blocktopk": ["--compress", f"blocktopk:{args.keep}"],
        "shoal-blocktopk-pipe": ["--compress", f"blocktopk:{args.keep}", "--pipeline"],
        "shoal-auto": ["--compress", "auto"],
        "shoal-local": ["--local-steps", str(args.local_steps)],
        "shoal-local-overlap": ["--local-steps", str(args.local_steps)]
        + ["--outer-overlap", str(args.outer_overlap)],
        "shoal-local-overlap-fast": ["--local-steps", str(args.local_steps)]
        + ["--outer-overlap", str(args.outer_overlap), "--consistency", "fast"],
    }[side]
    if "--compress" in extra and "compress" not in fields:
        return None
    if "--pipeline" in extra and "pipeline" not in fields:
        return None
    if "--local-steps" in extra and "local_steps" not in fields:
        return None
    if "--outer-overlap" in extra and "outer_overlap" not in fields:
        return None
    return extra


def worker_script(
    side: str, model: Model, steps: int, out: pathlib.Path, extra, checkpoints: bool = True
) -> list[str]:
    """The worker's command line; a shoal side writes a checkpoint every eval_every steps only
    with `checkpoints` (else the final one alone, after its last step)."""
    opts = [a for o in model.options for a in ("-o", o)]
    job = str(ROOT / model.job)
    common = [job, *opts, "--steps", str(steps), "--out", str(out)]
    if side in ("ddp", "powersgd"):
        return [str(DDP_WORKER), *common, "--eval-every", str(model.eval_every), *extra]
    every = model.eval_every if checkpoints else 0
    ckpt = ["--checkpoint-every", str(every), "--checkpoint-seconds", "0"]
    return ["-m", "shoal.worker", *common, *ckpt, *extra]


def run_side(bed, script, out: pathlib.Path, port: int, timeout_s: float) -> None:
    """Both sites' torchrun; shoal's checkpoints are hard-linked into out/kept as they appear
    (shoal keeps only the newest three)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": WAN, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    out.mkdir(parents=True)
    kept, procs = out / "kept", []
    kept.mkdir()
    deadline = time.monotonic() + timeout_s
    try:
        for site in range(bed.num_sites):
            with open(out / f"site{site}.log", "w") as log:
                argv = bed.torchrun_argv(site, script, port=port)
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            _keep_checkpoints(out / "checkpoints", kept)
            time.sleep(0.1)
        _keep_checkpoints(out / "checkpoints", kept)
        codes = [p.poll() for p in procs]
        if codes != [0] * len(procs):
            log = "".join(f.read_text() for f in sorted(out.glob("site*.log")))[-2000:]
            raise RuntimeError(f"side failed (exit codes {codes}): {log}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _keep_checkpoints(folder: pathlib.Path, kept: pathlib.Path) -> None:
    if not folder.exists():
        return
    for manifest in folder.glob("ckpt-*.json"):  # written after its .pt: the .pt is whole
        pt, link = manifest.with_suffix(".pt"), kept / manifest.with_suffix(".pt").name
        if not link.exists():
            with contextlib.suppress(FileNotFoundError):  # pruned meanwhile: lost, not fatal
                os.link(pt, link)
