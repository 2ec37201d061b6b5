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

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import fsspec
import torch

from shoal.errors import UserError, cannot_write

# what a fingerprint mismatch means (runtime/outputs.py `job_fingerprint`), for its message
OTHER_JOB = "its job file, -o options, seed, --consistency, slow-link or batch settings differ"

_NAME = re.compile(r"ckpt-(\d+)\.json$")
# what a writer killed mid-checkpoint leaves: a temporary file, or the .pt before its manifest
_PARTIAL = re.compile(r"ckpt-(\d+)\.(pt|pt\.tmp|json\.tmp)$")


def _fs(url: str) -> tuple[Any, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def _atomic_write(fs: Any, path: str, data: bytes) -> None:
    """`path` whole or not at all. A write the storage refuses (a full or read-only disk) is a
    StorageError naming the checkpoint file, and its partial temporary file is removed: it
    would hold space a resume needs, and the checkpoints written before stay as they were."""
    tmp, local = f"{path}.tmp", "file" in fs.protocol
    try:
        with fs.open(tmp, "wb") as f:
            f.write(data)
            if local:  # on the disk before the rename makes it the checkpoint (a power loss)
                f.flush()
                os.fsync(f.fileno())
        fs.mv(tmp, path)
        if local:  # and the rename itself
            _fsync_dir(os.path.dirname(path))
    except OSError as exc:
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp)
        raise cannot_write("checkpoint", path, exc) from None


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    try:
        fs.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise cannot_write("the checkpoint directory", root, exc) from None
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
        "run": os.environ.get("TORCHELASTIC_RUN_ID"),  # torchrun's job id (None: shoal run)
    }
    _atomic_write(fs, f"{base}.json", json.dumps(manifest).encode())
    try:
        _prune(fs, root, keep)
        _prune_partial(fs, root, step)
    except OSError as exc:
        raise cannot_write("the checkpoint directory", root, exc) from None  # pruning
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
    """Keep the newest `keep` whole checkpoints. One that is visibly broken (its manifest
    unreadable, its .pt missing or not the size the manifest says) does not count: a resume
    skipped it, and counting it would delete a good one. Broken ones are left for inspection
    while they are newer than the oldest one kept, and removed after it."""
    if keep == 0:  # keep them all (e.g. to evaluate every checkpoint of a run afterwards)
        return
    whole = 0
    for _, manifest in _manifests(fs, root):
        if whole < keep:
            whole += _looks_whole(fs, manifest)
            continue
        for path in (manifest, manifest[: -len(".json")] + ".pt"):
            if fs.exists(path):
                fs.rm(path)


def _prune_partial(fs: Any, root: str, step: int) -> None:
    """Remove what a writer killed mid-write left (a `ckpt-N.*.tmp`, a `ckpt-N.pt` without its
    manifest) for any step N before `step`, the checkpoint just written: the one writer writes
    them in step order, so none of these is still being written. A resume skips them, and
    they stayed on the disk for good, a checkpoint's size each."""
    paths = set(fs.ls(root, detail=False))  # one listing: no round trip per file
    for path in paths:
        m = _PARTIAL.search(path)
        if not m or int(m.group(1)) >= step:
            continue
        if m.group(2) != "pt" or path[: -len(".pt")] + ".json" not in paths:
            fs.rm(path)


def _looks_whole(fs: Any, manifest_path: str) -> bool:
    """The cheap check (no read of the .pt): its manifest parses and the size matches."""
    try:
        size = json.loads(fs.cat(manifest_path)).get("bytes")
        return fs.size(manifest_path[: -len(".json")] + ".pt") == size
    except (OSError, ValueError, AttributeError):
        return False


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _verified(fs: Any, step: int, manifest_path: str, fingerprint: str | None) -> bytes | None:
    """The .pt bytes of one checkpoint if its manifest and checksum hold (a one-line warning
    and None if not); raises UserError if it belongs to another job (`fingerprint` None: any)."""
    try:
        manifest = json.loads(fs.cat(manifest_path))
        data = fs.cat(manifest_path[: -len(".json")] + ".pt")
    except (OSError, ValueError) as exc:
        _warn(f"skipping checkpoint {manifest_path}: unreadable ({exc})")
        return None
    # every manifest shoal writes has its step and its job's fingerprint: one without either
    # is damaged (skipped, as a bad checksum is), not proof of another job
    if not isinstance(manifest, dict) or manifest.get("step") != step:
        _warn(f"skipping checkpoint {manifest_path}: not a shoal checkpoint manifest")
        return None
    theirs = manifest.get("fingerprint")
    if not isinstance(theirs, str):
        _warn(f"skipping checkpoint {manifest_path}: its manifest has no job fingerprint")
        return None
    if fingerprint is not None and theirs != fingerprint:
        raise UserError(
            f"checkpoint {manifest_path} belongs to a different job "
            f"(fingerprint {theirs[:12]}, expected {fingerprint[:12]}): {OTHER_JOB}"
        )
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != manifest.get("bytes") or digest != manifest.get("sha256"):
        _warn(f"skipping checkpoint {manifest_path}: checksum mismatch (truncated or corrupted)")
        return None
    return data


def _unpickled(data: bytes, step: int, manifest_path: str) -> dict | None:
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything but plain tensors and values is refused
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _warn(f"skipping checkpoint {manifest_path}: refused to load ({first})")
        return None
    if not isinstance(state, dict) or state.get("step") != step:
        _warn(f"skipping checkpoint {manifest_path}: not a training state of step {step}")
        return None
    return state


def load_latest(url: str, fingerprint: str, required: bool = False) -> tuple[int, dict] | None:
    """The newest valid checkpoint under `url` as (step, state), or None if there is none;
    `required` (a --resume): no usable checkpoint is an error, not a fresh start."""
    fs, root = _fs(url)
    found = _manifests(fs, root)
    for step, manifest_path in found:
        data = _verified(fs, step, manifest_path, fingerprint)
        state = _unpickled(data, step, manifest_path) if data is not None else None
        if state is not None:
            return step, state
    if required:
        raise UserError(_none_usable(url, len(found)))
    return None


def _none_usable(url: str, skipped: int) -> str:
    if skipped:
        return f"--resume: no usable checkpoint in {url} ({skipped} skipped, see the warnings)"
    return f"--resume: no checkpoint found in {url}"


def foreign_checkpoints(url: str, run_id: str | None) -> list[str]:
    """Manifests under `url` written by another run than torchrun's job `run_id` (a fresh
    torchrun job refuses them, as `shoal run` refuses a directory holding checkpoints)."""
    fs, root = _fs(url)
    foreign = []
    for _, manifest_path in _manifests(fs, root):
        try:
            theirs = json.loads(fs.cat(manifest_path)).get("run")
        except (OSError, ValueError, AttributeError):
            theirs = None
        if theirs is None or theirs != run_id:
            foreign.append(manifest_path)
    return foreign


def latest_checkpoint_step(url: str, fingerprint: str | None = None) -> int | None:
    """The step of the newest checkpoint under `url` whose manifest and checksum hold (None:
    none), without unpickling it: what a failure message may offer to --resume from."""
    try:
        fs, root = _fs(url)
        found = _manifests(fs, root)
    except (OSError, ValueError, ImportError):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, manifest_path in found:
            try:
                if _verified(fs, step, manifest_path, fingerprint) is not None:
                    return step
            except UserError:
                return None  # another job's: nothing to offer
    return None


def check_resumable(url: str, fingerprint: str | None = None) -> int:
    """Before a --resume starts any worker: the step it will continue from. Each skipped
    checkpoint is one warning line on stderr; none usable is a UserError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fs, root = _fs(url)
        found = _manifests(fs, root)
        step = next((s for s, m in found if _verified(fs, s, m, fingerprint) is not None), None)
    for w in caught:
        sys.stderr.write(f"shoal: warning: {w.message}\n")
    if step is None:
        raise UserError(_none_usable(url, len(found)))
    return step


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
