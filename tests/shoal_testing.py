"""Helpers shared by the multi-process tests (importable as `shoal_testing`)."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGITS = str(ROOT / "examples" / "digits.py")
# `shoal run examples/digits.py --steps 30` on any layout (the invariant of the README); that it
# is one worker's uninterrupted run in this process is test_failures.py's first test
DIGITS_30 = "f3859b268b1fcf92f4b59402ab968f02878b23ebae60d0baedfe735b4b8179b5"


def shoal_run(
    out: pathlib.Path,
    workers: str,
    steps: int,
    *extra: str,
    job: str = DIGITS,
    env: dict | None = None,
    expect: int = 0,
) -> dict | str:
    """Run `shoal run` in a real subprocess; return result.json (stderr if it must fail)."""
    cmd = [sys.executable, "-m", "shoal", "run", job, "--workers", workers, "--steps",
           str(steps), "--out", str(out), *extra]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == expect, proc.stderr[-3000:]
    if expect:
        return proc.stderr
    return json.loads((out / "result.json").read_text())


def metrics(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def free_port() -> int:
    from shoal.launcher.spec import free_port as fp

    return fp()
