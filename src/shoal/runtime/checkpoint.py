"""Durable checkpoints: atomic, checksummed, tagged with the job, loadable without unpickling code.

A checkpoint is two files in the checkpoint directory (a local path or an fsspec URL):
`ckpt-<step>.pt` (torch.save of tensors and plain values; loaded with weights_only=True, so
no arbitrary object is ever unpickled) and `ckpt-<step>.json` (step, job fingerprint, byte
size and SHA-256 of the .pt). The .pt is written under a temporary name and renamed, then the
.json is written the same way: a checkpoint whose manifest exists is complete. Loading picks
the newest checkpoint whose checksum matches, warning (one line) about any it skips, and
refuses one that belongs to another job.

`AsyncCheckpointer` takes a snapshot on the training thread (tensors cloned to CPU) and writes
it on a background thread, so training continues while the bytes go out; `Checkpointer` owns
the run's cadence (by steps and by seconds) and the final checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import fsspec
import torch

from shoal.errors import UserError

_NAME = re.compile(r"ckpt-(\d+)\.json$")


def _fs(url: str) -> tuple[Any, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def _atomic_write(fs: Any, path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, path)


def snapshot(state: Any) -> Any:
    """A copy of `state` whose tensors live on the CPU, safe to write while training goes on."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: snapshot(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(v) for v in state)
    return state


def save_checkpoint(url: str, step: int, state: dict, fingerprint: str, keep: int = 3) -> str:
    fs, root = _fs(url)
    fs.makedirs(root, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    base = f"{root}/ckpt-{step:09d}"
    _atomic_write(fs, f"{base}.pt", data)
    manifest = {
        "step": step,
        "fingerprint": fingerprint,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    _atomic_write(fs, f"{base}.json", json.dumps(manifest).encode())
    _prune(fs, root, keep)
    return f"{base}.pt"


def _manifests(fs: Any, root: str) -> list[tuple[int, str]]:
    if not fs.exists(root):
        return []
    found = []
    for path in fs.ls(root, detail=False):
        m = _NAME.search(path)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found, reverse=True)


def _prune(fs: Any, root: str, keep: int) -> None:
    for _, manifest in _manifests(fs, root)[keep:]:
        for path in (manifest, manifest[: -len(".json")] + ".pt"):
            if fs.exists(path):
                fs.rm(path)


def load_latest(url: str, fingerprint: str) -> tuple[int, dict] | None:
    """The newest valid checkpoint under `url` as (step, state), or None if there is none."""
    fs, root = _fs(url)
    for step, manifest_path in _manifests(fs, root):
        try:
            manifest = json.loads(fs.cat(manifest_path))
            data = fs.cat(manifest_path[: -len(".json")] + ".pt")
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping checkpoint {manifest_path}: unreadable ({exc})", stacklevel=2)
            continue
        theirs = str(manifest.get("fingerprint"))
        if theirs != fingerprint:
            raise UserError(
                f"checkpoint {manifest_path} belongs to a different job "
                f"(fingerprint {theirs[:12]}, expected {fingerprint[:12]})"
            )
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != manifest.get("bytes") or digest != manifest.get("sha256"):
            warnings.warn(
                f"skipping checkpoint {manifest_path}: checksum mismatch (truncated or corrupted)",
                stacklevel=2,
            )
            continue
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError) as exc:  # not plain tensors and values
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            warnings.warn(
                f"skipping checkpoint {manifest_path}: refused to load ({first})", stacklevel=2
            )
            continue
        return step, state
    return None


class AsyncCheckpointer:
    """Writes checkpoints on a background thread; at most one write in flight."""

    def __init__(self, url: str, fingerprint: str, keep: int = 3):
        self.url, self.fingerprint, self.keep = url, fingerprint, keep
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def save(self, step: int, state: dict) -> None:
        self.wait()
        copy = snapshot(state)  # on the caller's thread: consistent with this step

        def write() -> None:
            try:
                save_checkpoint(self.url, step, copy, self.fingerprint, self.keep)
            except BaseException as exc:  # reported by wait()
                self.error = exc

        self._thread = threading.Thread(target=write, name="shoal-checkpoint", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error


class Checkpointer:
    """The run's durable checkpoints at their cadence: every `every` steps and every `seconds`
    seconds (0: off), written in the background, plus the final one, written at once."""

    def __init__(
        self, url: str, fingerprint: str, every: int = 0, seconds: float = 0.0, keep: int = 3
    ):
        self.url, self.fingerprint, self.every, self.seconds = url, fingerprint, every, seconds
        self.keep, self.writer = keep, AsyncCheckpointer(url, fingerprint, keep)
        self.last = time.monotonic()

    def due(self, step: int) -> bool:
        by_steps = self.every > 0 and step % self.every == 0
        by_time = self.seconds > 0 and time.monotonic() - self.last >= self.seconds
        return by_steps or by_time

    def maybe_save(self, step: int, state_fn: Callable[[], dict]) -> bool:
        """Save the state after `step` steps if the cadence says so (`state_fn` is called only
        then: gathering the state is not free)."""
        if not self.due(step):
            return False
        self.writer.save(step, state_fn())
        self.last = time.monotonic()
        return True

    def finish(self) -> None:
        """Wait for the write in flight (and raise its error, if any)."""
        self.writer.wait()

    def final(self, step: int, state: dict) -> str:
        """The end-of-run checkpoint, after any write in flight; returns its path."""
        self.finish()
        return save_checkpoint(self.url, step, state, self.fingerprint, self.keep)
