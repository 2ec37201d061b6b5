"""The step's one collective: gradients, BatchNorm buffers, losses and timings in one all-reduce.

Everything a step must share is packed into one int64 tensor and summed:
- the gradient: exact mode sums fixed-point integers (see `exact.py`); fast mode sums float32
  gradients in a separate float all-reduce, like torch DDP;
- the module buffers (BatchNorm running statistics) after micro-batch 0, as raw bits: only
  the worker that computed micro-batch 0 contributes them, everyone else adds zeros, so the
  sum is that worker's bit pattern (DDP's convention: buffers are those of rank 0);
- each micro-batch's loss (float64 bits, in slot j), each worker's seconds per micro-batch
  at its kind's speed and at the host's (float64 bits, in slot rank), membership flags (who
  leaves after this step, whether the group must regroup) and the overflow flag of the exact
  sum.
One message per step keeps latency low on slow links and keeps every worker's view identical.
While it is in flight the worker does the work that does not need its result (`overlap`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from shoal.runtime.exact import FixedPointAccumulator, flat_gradients
from shoal.runtime.membership import collective, peer_failures

_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of `t`, widened to int64 (invertible with `from_bits`)."""
    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        return flat.to(torch.int64)
    return flat.view(_INT_OF_SIZE[flat.element_size()]).to(torch.int64)


def from_bits(bits: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.bool:
        return bits.to(torch.bool).view(like.shape)
    return bits.to(_INT_OF_SIZE[like.element_size()]).view(like.dtype).view(like.shape)


@dataclass
class StepOutcome:
    ok: bool  # False: an exact-mode bound overflowed; the step must be recomputed
    losses: list[float]  # per micro-batch, index j
    seconds_per_micro_batch: list[float | None]  # per worker; None if it computed nothing
    host_seconds_per_micro_batch: list[float | None]  # the same, before emulation's padding
    leaving: list[int]  # ranks that leave the group after this step
    regroup: bool  # the group must re-form after this step (someone joins)

    @classmethod
    def redo(cls) -> StepOutcome:
        """The step's sum is not usable yet: recompute it (with agreed or exact bounds)."""
        return cls(False, [], [], [], [], False)


class StepReducer:
    """Accumulates this worker's micro-batches and reduces a step across the group."""

    def __init__(self, model: torch.nn.Module, consistency: str, rank: int, world_size: int):
        if consistency not in ("exact", "fast"):
            raise ValueError(f"consistency must be 'exact' or 'fast', got {consistency!r}")
        self.consistency, self.rank, self.world_size = consistency, rank, world_size
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buffers = list(model.buffers())
        self.device = self.params[0].device
        self.fixed = FixedPointAccumulator(self.params) if consistency == "exact" else None
        if self.fixed is None:  # fast: a flat float gradient, summed by autograd then all-reduced
            self.flat_grad = flat_gradients(self.params)
        self.num_buffer_bits = sum(b.numel() for b in self.buffers)
        self._num_micro_batches = -1

    def begin(self, num_micro_batches: int) -> None:
        if num_micro_batches != self._num_micro_batches:
            self._num_micro_batches = num_micro_batches
            grad_ints = self.fixed.numel if self.fixed else 0
            extra = self.num_buffer_bits + num_micro_batches + 3 * self.world_size + 2
            self.buf = torch.zeros(grad_ints + extra, dtype=torch.int64, device=self.device)
            self.extra = self.buf[grad_ints:]
        self.extra.zero_()  # the gradient's part is the accumulator's to reset
        self.losses: dict[int, float] = {}
        if self.fixed:
            self.fixed.begin(num_micro_batches, self.buf[: self.fixed.numel])
        else:
            self.flat_grad.zero_()

    def add(self, micro_batch: int, loss: float) -> None:
        """Fold the micro-batch just back-propagated into this worker's partial sum."""
        if self.fixed:
            self.fixed.add()
        self.losses[micro_batch] = loss
        if micro_batch == 0 and self.buffers:
            self.extra[: self.num_buffer_bits] = torch.cat([bits_of(b) for b in self.buffers])

    def reduce(
        self,
        timing: tuple[float, float] | None,
        leaving: bool = False,
        regroup: bool = False,
        overlap: Callable[[], None] | None = None,
    ) -> StepOutcome:
        """`timing`: this worker's seconds per micro-batch at its kind's speed and at the
        host's; None if it computed nothing. `overlap`: work that does not need the step's
        result (the next step's micro-batches, the leader's bookkeeping), done while the
        collective is in flight."""
        M, nb, W = self._num_micro_batches, self.num_buffer_bits, self.world_size
        if self.fixed and self.fixed.probing:  # a probe pass: agree on exact bounds, recompute
            self._rebound()
            return StepOutcome.redo()
        # this worker's scalars, zero where others write: losses | times | leaving | flags
        mine = np.zeros(M + 3 * W + 2, dtype=np.int64)
        floats = mine.view(np.float64)  # float64 slots travel as their bits
        for j, loss in self.losses.items():
            floats[j] = loss
        if timing is not None:
            floats[M + self.rank], floats[M + W + self.rank] = timing
        mine[M + 2 * W + self.rank] = leaving
        mine[-2:] = regroup, bool(self.fixed and self.fixed.overflow)
        self.extra[nb:].copy_(torch.from_numpy(mine))
        in_flight = []
        if W > 1:
            with peer_failures():
                if self.fixed is None:
                    in_flight.append(dist.all_reduce(self.flat_grad, async_op=True))
                in_flight.append(dist.all_reduce(self.buf, async_op=True))
        if overlap is not None:
            overlap()  # outside peer_failures: its own errors are not a peer's
        with peer_failures():
            for work in in_flight:
                work.wait()
        extra = self.extra.cpu()
        summed = extra[nb:].numpy()
        if summed[-1] > 0:  # some micro-batch exceeded its predicted bound
            self.fixed.probe_next = True
            return StepOutcome.redo()
        self._write_buffers(extra[:nb])
        if self.fixed:
            self.fixed.decode(self.buf[: self.fixed.numel])
        else:
            self.flat_grad /= M
        floats = summed.view(np.float64)
        times = [t if t > 0 else None for t in floats[M : M + 2 * W].tolist()]
        leavers = [r for r in range(W) if summed[M + 2 * W + r] > 0]
        regrouping = bool(summed[-2] > 0)  # anyone's request, not just this worker's
        return StepOutcome(True, floats[:M].tolist(), times[:W], times[W:], leavers, regrouping)

    def _rebound(self) -> None:
        global_max = self.fixed.local_max.clone()
        if self.world_size > 1:
            collective(dist.all_reduce, global_max, op=dist.ReduceOp.MAX)
        self.fixed.rebound(global_max)

    def _write_buffers(self, bits: torch.Tensor) -> None:
        offset = 0
        for b in self.buffers:
            n = b.numel()
            b.copy_(from_bits(bits[offset : offset + n].to(b.device), b))
            offset += n

    def state_dict(self) -> dict:
        return self.fixed.state_dict() if self.fixed else {}

    def load_state_dict(self, state: dict) -> None:
        if self.fixed:
            self.fixed.load_state_dict(state)
