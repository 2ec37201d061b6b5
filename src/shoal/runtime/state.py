"""The training state: its digest, and packing it for checkpoints and transfers.

`state_sha256` hashes parameters, buffers and optimizer state in a canonical byte encoding
(name, dtype, shape, raw bytes), so two runs have equal digests exactly when their states
are bitwise equal.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import torch


def _feed_tensor(h: hashlib._Hash, name: str, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _feed_obj(h: hashlib._Hash, name: str, obj: Any) -> None:
    obj = obj.item() if isinstance(obj, np.generic) else obj  # as the state travels: plain()
    if isinstance(obj, torch.Tensor):
        _feed_tensor(h, name, obj)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            _feed_obj(h, f"{name}.{key}", obj[key])
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _feed_obj(h, f"{name}[{i}]", item)
    else:
        h.update(f"{name}={json.dumps(obj, default=repr)}|".encode())


def state_sha256(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():  # parameters and buffers, in module order
        _feed_tensor(h, f"model.{name}", t)
    _feed_obj(h, "optimizer", optimizer.state_dict())
    return h.hexdigest()


def training_state(trainer: Any) -> dict:
    """Everything needed to continue bit for bit (tensors and plain values only)."""
    return {
        "step": trainer.step,
        "samples_seen": trainer.samples_seen,
        "model": trainer.model.state_dict(),
        "unsaved_buffers": unsaved_buffers(trainer.model),
        "optimizer": plain(trainer.optimizer.state_dict()),
        "scheduler": plain(trainer.scheduler.state_dict()) if trainer.scheduler else None,
        "reducer": trainer.reducer.state_dict(),
        # adaptive batch: the next step's M and the policy's state (JSON-safe values)
        "num_micro_batches": trainer.rebalancer.num_micro_batches,
        "batch": trainer.batch.state_dict(),
        "nonfinite_skipped": trainer.nonfinite_skipped,  # steps skipped (--on-nonfinite skip)
        "loss_scale": trainer.loss_scale.state_dict(),  # S and its growth count (precision.py)
        # local-update mode: the reference weights and the outer optimizer (local_update.py)
        "local_update": trainer.local.state_dict() if getattr(trainer, "local", None) else None,
    }


def plain(obj: Any) -> Any:
    """`obj` with numpy scalars as the Python numbers they equal. A rate computed with numpy (a
    LambdaLR of np.cos) puts np.float64 into the optimizer's and the scheduler's state, which
    torch.load(weights_only=True) refuses: a join's transfer and every --resume failed. The
    digest reads them as these numbers too (`_feed_obj`)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):  # (not a namedtuple: its fields are not an iterable's)
        return type(obj)(plain(v) for v in obj)
    return obj


def unsaved_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The buffers a module registered with persistent=False, which its state_dict leaves out.
    Every step sends them with the others (reduce.py), and a forward pass may change them (a
    counter): a joiner or a resumed run that rebuilt them afresh computed its micro-batches
    from other values, and the digest left the uninterrupted run's."""
    saved = model.state_dict(keep_vars=True)
    return {name: b for name, b in model.named_buffers() if name not in saved}


def load_training_state(trainer: Any, state: dict) -> None:
    trainer.model.load_state_dict(state["model"])
    buffers = unsaved_buffers(trainer.model)
    for name, value in (state.get("unsaved_buffers") or {}).items():  # older states: none
        buffers[name].copy_(value)
    trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.scheduler and state.get("scheduler") is not None:
        trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.reducer.load_state_dict(state["reducer"])
    trainer.step = int(state["step"])
    trainer.samples_seen = int(state["samples_seen"])
    if state.get("batch") is not None:  # older states have none: a fixed batch
        trainer.batch.load_state_dict(state["batch"])
    num_micro_batches = state.get("num_micro_batches")
    if num_micro_batches and num_micro_batches != trainer.rebalancer.num_micro_batches:
        trainer.rebalancer.resize(int(num_micro_batches))
    trainer.nonfinite_skipped = int(state.get("nonfinite_skipped", 0))
    trainer.loss_scale.load_state_dict(state.get("loss_scale"))  # older states: none
    if getattr(trainer, "local", None):
        trainer.local.load_state_dict(state.get("local_update"), trainer.step)
