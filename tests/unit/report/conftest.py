"""Fixtures for the report tests: synthetic run directories and one rendered report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal.report import write_report
from unit.report.synthetic_run import write_synthetic_run


@pytest.fixture
def synthetic_dir(tmp_path: Path) -> Path:
    """A fresh synthetic run (40 steps, a failure, two joins, a leave) in its own directory."""
    return write_synthetic_run(tmp_path / "run")


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic run, rendered once for all tests that only read the result."""
    directory = write_synthetic_run(tmp_path_factory.mktemp("rendered") / "run")
    write_report(directory)
    return directory


@pytest.fixture
def write_metrics(tmp_path: Path) -> Callable[..., Path]:
    """Write metrics.jsonl lines (dicts are JSON-encoded, strings written as is); return the dir."""

    def write(lines: list[dict | str], result: dict | None = None) -> Path:
        directory = tmp_path / "run"
        directory.mkdir(exist_ok=True)
        text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
        (directory / "metrics.jsonl").write_text(text + "\n", encoding="utf-8")
        if result is not None:
            (directory / "result.json").write_text(json.dumps(result), encoding="utf-8")
        return directory

    return write
