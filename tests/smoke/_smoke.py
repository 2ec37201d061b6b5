"""Running a script of the tree in a fresh process, as a user would, and reading what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], timeout: float = 300.0, code: int = 0) -> subprocess.CompletedProcess:
    """`python ARGS...` from the repository root with src/ importable; fails on an exit other
    than `code` (0: success)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")]))
    # The interpreter's own scripts (torchrun) first, as in an activated virtual environment.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == code, f"{args} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def json_lines(text: str) -> list[dict]:
    """Every stdout line that is a JSON object (benches print one per result)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
