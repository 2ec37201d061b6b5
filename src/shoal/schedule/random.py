"""Seeding and the model-parallel RNG tracker, on CPU and GPU.

`set_random_seed` seeds Python, NumPy and torch with an offset per data/pipeline rank and, when a
tensor-parallel rank is given, registers a ``"model-parallel-rng"`` stream seeded differently
per TP rank. `get_cuda_rng_tracker()` (name kept for Slapo programs) returns the tracker; its
`fork()` runs a block on that stream - the CPU generator always, the current CUDA device's too
when CUDA is in use - and restores the default stream afterwards.

Slapo programs (and Megatron-derived code) also reach into this module by its internal names:
`CudaRNGStatesTracker`, the module-level `_CUDA_RNG_STATE_TRACKER`,
`_MODEL_PARALLEL_RNG_TRACKER_NAME`, `model_parallel_cuda_manual_seed` and `_set_cuda_rng_state`;
they are all here, and all work on CPU.
"""

from __future__ import annotations

import contextlib
import random as _random
from collections.abc import Iterator

import torch

MODEL_PARALLEL_RNG = "model-parallel-rng"
_TP_SEED_OFFSET = 2718  # Megatron's constant: keeps the TP stream away from the default one


def _cuda_on() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _get_state() -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), (torch.cuda.get_rng_state() if _cuda_on() else None)


def _set_state(state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None and _cuda_on():
        torch.cuda.set_rng_state(state[1])


class RNGStatesTracker:
    """Named RNG streams that can be swapped in for a block of code."""

    def __init__(self) -> None:
        self.states: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.seeds: set[int] = set()

    # Megatron's attribute names, read by code written against Slapo's tracker
    states_ = property(lambda self: self.states)
    seeds_ = property(lambda self: self.seeds)

    def reset(self) -> None:
        self.states = {}
        self.seeds = set()

    def get_states(self) -> dict:
        return dict(self.states)

    def set_states(self, states: dict) -> None:
        self.states = dict(states)

    def add(self, name: str, seed: int) -> None:
        if name in self.states:
            raise ValueError(f"RNG stream {name!r} already exists")
        if seed in self.seeds:
            raise ValueError(f"seed {seed} is already used by another RNG stream")
        self.seeds.add(seed)
        saved = _get_state()
        torch.manual_seed(seed)  # seeds CPU and (lazily) every CUDA device
        self.states[name] = _get_state()
        _set_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str = MODEL_PARALLEL_RNG) -> Iterator[None]:
        if name not in self.states:
            raise ValueError(f"RNG stream {name!r} was never added (call set_random_seed)")
        saved = _get_state()
        _set_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = _get_state()
            _set_state(saved)


CudaRNGStatesTracker = RNGStatesTracker  # Slapo's (Megatron's) name; not CUDA-only here
_TRACKER = RNGStatesTracker()
_CUDA_RNG_STATE_TRACKER = _TRACKER  # the module-level object Slapo's code imports
_MODEL_PARALLEL_RNG_TRACKER_NAME = MODEL_PARALLEL_RNG


def get_cuda_rng_tracker() -> RNGStatesTracker:
    """The process-wide tracker (works without CUDA despite the name)."""
    return _TRACKER


get_rng_tracker = get_cuda_rng_tracker


def is_random_seed_set() -> bool:
    return MODEL_PARALLEL_RNG in _TRACKER.states


def set_random_seed(
    seed: int,
    dp_rank: int | None = None,
    pp_rank: int | None = None,
    tp_rank: int | None = None,
    always_enable_tp_seed: bool = False,
) -> int:
    """Seed every generator; returns the seed used for the default stream."""
    seed = seed + 100 * (pp_rank or 0) + 10 * (dp_rank or 0)
    _random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional here
        pass
    torch.manual_seed(seed)
    _TRACKER.reset()
    if tp_rank is not None or always_enable_tp_seed:
        _TRACKER.add(MODEL_PARALLEL_RNG, seed + _TP_SEED_OFFSET + (tp_rank or 0))
    return seed


def model_parallel_cuda_manual_seed(
    seed: int, tp_rank: int = 0, always_enable_tp_seed: bool = False
) -> None:
    """Megatron's entry point: the default stream gets `seed`; the model-parallel stream
    ``seed + 2718 + tp_rank`` (registered when there is a TP rank or `always_enable_tp_seed`)."""
    torch.manual_seed(seed)
    _TRACKER.reset()
    if tp_rank is not None or always_enable_tp_seed:
        _TRACKER.add(MODEL_PARALLEL_RNG, seed + _TP_SEED_OFFSET + (tp_rank or 0))


def _set_cuda_rng_state(new_state: torch.Tensor, device: int | str | torch.device = -1) -> None:
    """Set the current CUDA device's RNG state (the CPU generator's when CUDA is not in use), as
    Megatron's helper of that name does."""
    if _cuda_on():
        idx = torch.cuda.current_device() if device == -1 else device
        torch.cuda.set_rng_state(new_state, idx)
    else:
        torch.set_rng_state(new_state)
