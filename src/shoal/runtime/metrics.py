"""Run outputs: `metrics.jsonl` (one JSON object per line, flushed as written) and `result.json`."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from shoal.errors import UserError


def prepare_out_dir(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Create the run directory and check it can be written, or fail with a one-line error."""
    out = pathlib.Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".shoal-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write to --out {str(out)!r}: {exc.strerror or exc}") from None
    return out


class MetricsWriter:
    def __init__(self, out_dir: str | pathlib.Path, append: bool = False):
        self.path = pathlib.Path(out_dir) / "metrics.jsonl"
        self._file = open(self.path, "a" if append else "w")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_json_atomic(path: str | pathlib.Path, data: dict[str, Any]) -> None:
    path = pathlib.Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
