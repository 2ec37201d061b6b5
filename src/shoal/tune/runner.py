"""Parent side of a trial: run one `TrialSpec` in a fresh subprocess and classify the outcome.

This module owns the process boundary: it launches `python -m shoal.tune`,
enforces a wall-clock timeout and (on Linux) a per-process memory cap by polling the resident set
size of the trial's process tree, and turns the child's exit into a `TrialOutcome` with a status:
`ok`, `over_cap` (killed or measured above the cap), `oom` (the allocator or the kernel gave up),
`timeout` or `error`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from shoal.tune.trial import RESULT_PREFIX, TrialSpec

_OOM_MARKERS = ("out of memory", "OutOfMemoryError", "can't allocate memory", "std::bad_alloc")


@dataclass
class TrialOutcome:
    """What a trial produced. Measurements are None unless `status == "ok"` or `"over_cap"`."""

    status: str
    samples_per_s: float | None = None
    step_time_s: float | None = None
    cpu_time_s: float | None = None
    peak_memory_mb: float | None = None
    detail: str = ""
    raw: dict = field(default_factory=dict)


def _tree_rss_max_mb(pid: int) -> float:
    """Largest resident set size (MiB) among `pid` and its descendants; 0 if unreadable."""
    peak = 0.0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = (task / "children").read_text().split()
                stack.extend(int(k) for k in kids)
        except (OSError, ValueError):
            continue
    return peak


def _read_and_close(fh: IO[str]) -> str:
    fh.seek(0)
    text = fh.read()
    fh.close()
    return text


def run_trial(
    spec: TrialSpec,
    memory_cap_mb: float | None = None,
    timeout_s: float = 600.0,
    poll_s: float = 0.05,
    track_live_memory: bool = True,
) -> TrialOutcome:
    """Measure `spec` in a subprocess; kill it early if a process exceeds `memory_cap_mb`.

    `track_live_memory` sets glibc's `MALLOC_MMAP_THRESHOLD_` to 64 KiB in the child, so every
    tensor buffer is its own mapping and is returned to the OS when freed. Otherwise memory
    freed by the warm-up step stays resident and is reused, and resident size would understate
    what a step needs. The price is a page fault per fresh buffer, paid equally by all trials.
    """
    env = dict(os.environ)
    if track_live_memory and spec.device == "cpu":
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    src = str(Path(__file__).resolve().parents[2])  # .../src, so the child imports this shoal
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "shoal.tune", spec.to_json()]
    # Files rather than pipes: a chatty trial must not block on a full pipe while we poll.
    out_file, err_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        cmd,
        stdout=out_file,
        stderr=err_file,
        text=True,
        env=env,
        start_new_session=True,  # so a kill reaches the rank processes too
    )
    start = time.monotonic()
    killed_for = ""
    polled_peak = 0.0
    try:
        while proc.poll() is None:
            if time.monotonic() - start > timeout_s:
                killed_for = "timeout"
            elif memory_cap_mb is not None:
                polled_peak = max(polled_peak, _tree_rss_max_mb(proc.pid))
                if polled_peak > memory_cap_mb:
                    killed_for = "over_cap"
            if killed_for:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(poll_s)
        proc.wait()
    except BaseException:  # e.g. Ctrl-C: do not leave the trial (own session) running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        stdout, stderr = _read_and_close(out_file), _read_and_close(err_file)
    if killed_for == "timeout":
        return TrialOutcome("timeout", detail=f"no result within {timeout_s:.0f} s")
    if killed_for == "over_cap":
        return TrialOutcome(
            "over_cap",
            peak_memory_mb=polled_peak,
            detail=f"killed at {polled_peak:.0f} MiB resident (> cap {memory_cap_mb:.0f} MiB)",
        )
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            raw = json.loads(line[len(RESULT_PREFIX) :])
            over = memory_cap_mb is not None and raw["peak_memory_mb"] > memory_cap_mb
            return TrialOutcome(
                "over_cap" if over else "ok",
                samples_per_s=raw["samples_per_s"],
                step_time_s=raw["step_time_s"],
                cpu_time_s=raw.get("cpu_time_s"),
                peak_memory_mb=raw["peak_memory_mb"],
                raw=raw,
            )
    tail = stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
    if proc.returncode == -signal.SIGKILL or any(m in stderr for m in _OOM_MARKERS):
        return TrialOutcome("oom", detail=tail[0][:300])
    if proc.returncode < 0:  # a crash (a segfault, an abort) says so; stderr may say nothing
        return TrialOutcome("error", detail=f"killed by {signal.Signals(-proc.returncode).name}")
    return TrialOutcome("error", detail=tail[0][:300])
