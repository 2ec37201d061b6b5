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
  sum;
- with adaptive batch sizes (exact mode), each micro-batch's squared gradient norm |g_j|^2
  (float64 bits, in slot j, written by the worker that computed j, so the same bits on any
  layout) and, on the steps the policy measures similarity, the exact integer sum of the first
  half of the micro-batches (j < M//2) on the gradient's grid, appended to the message.
One message per step keeps latency low on slow links and keeps every worker's view identical.
With `--compress` (exact mode) the message crosses slow links in `sites.py`'s exchange instead:
summed inside each site, compressed between sites; the rest of the step reads the same.
`StepScalars` lays out its scalar part by name. `StepReducer.start` sends the message and
returns a `PendingStep`; the trainer does the work that does not need the step's result, then
waits on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from shoal.errors import UserError
from shoal.runtime.exact import FixedPointAccumulator, flat_gradients
from shoal.runtime.membership import peer_failures
from shoal.runtime.sites import SiteExchange

_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_slots(t: torch.Tensor) -> int:
    """The int64 values `bits_of(t)` takes: one per element, two for a 16-byte one (complex128,
    e.g. rotary frequencies computed in float64)."""
    return t.numel() * (2 if t.element_size() == 16 else 1)


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of `t`, widened to int64 (invertible with `from_bits`)."""
    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        return flat.to(torch.int64)
    if flat.element_size() == 16:
        return flat.view(torch.int64)
    return flat.view(_INT_OF_SIZE[flat.element_size()]).to(torch.int64)


def from_bits(bits: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.bool:
        return bits.to(torch.bool).view(like.shape)
    if like.element_size() == 16:  # a copy: a slice's offset may not fall on 16 bytes
        return bits.clone().view(like.dtype).view(like.shape)
    return bits.to(_INT_OF_SIZE[like.element_size()]).view(like.dtype).view(like.shape)


class StepScalars:
    """The step's scalars in the message, by name: losses (one per micro-batch), seconds per
    micro-batch at this kind's speed and at the host's, leaving (one each per worker), then
    the regroup request and the exact sum's overflow. Each worker writes only its own slots
    and zeros elsewhere, so the sum holds everyone's; float64 values travel as their bits."""

    def __init__(self, num_micro_batches: int, world_size: int, measure: bool = False):
        M, W = num_micro_batches, world_size
        self.losses = slice(0, M)
        self.seconds = slice(M, M + W)
        self.host_seconds = slice(M + W, M + 2 * W)
        self.leaving = slice(M + 2 * W, M + 3 * W)
        self.regroup, self.overflow = M + 3 * W, M + 3 * W + 1
        self.size = M + 3 * W + 2
        # per micro-batch |g_j|^2 only when measured: the message is otherwise unchanged
        self.sqnorms = slice(self.size, self.size + M) if measure else None
        self.size += M if measure else 0
        self.world_size = world_size

    def pack(
        self,
        rank: int,
        losses: dict[int, float],
        timing: tuple[float, float] | None,
        leaving: bool,
        regroup: bool,
        overflow: bool,
        sqnorms: dict[int, float] | None = None,
    ) -> np.ndarray:
        mine = np.zeros(self.size, dtype=np.int64)
        floats = mine.view(np.float64)
        for j, loss in losses.items():
            floats[self.losses.start + j] = loss
        for j, sqnorm in (sqnorms or {}).items():
            floats[self.sqnorms.start + j] = sqnorm
        if timing is not None:
            floats[self.seconds.start + rank], floats[self.host_seconds.start + rank] = timing
        mine[self.leaving.start + rank] = leaving
        mine[self.regroup], mine[self.overflow] = regroup, overflow
        return mine

    def overflowed(self, summed: np.ndarray) -> bool:
        return bool(summed[self.overflow] > 0)  # some worker's micro-batch exceeded its bound

    def outcome(self, summed: np.ndarray) -> StepOutcome:
        floats = summed.view(np.float64)

        def seconds(part: slice) -> list[float | None]:
            return [t if t > 0 else None for t in floats[part].tolist()]

        return StepOutcome(
            losses=floats[self.losses].tolist(),
            seconds_per_micro_batch=seconds(self.seconds),
            host_seconds_per_micro_batch=seconds(self.host_seconds),
            leaving=[r for r in range(self.world_size) if summed[self.leaving][r] > 0],
            regroup=bool(summed[self.regroup] > 0),  # anyone's request, not just this worker's
            sqnorms=floats[self.sqnorms].tolist() if self.sqnorms else None,
        )


@dataclass
class StepOutcome:
    losses: list[float]  # per micro-batch, index j
    seconds_per_micro_batch: list[float | None]  # per worker; None if it computed nothing
    host_seconds_per_micro_batch: list[float | None]  # the same, before emulation's padding
    leaving: list[int]  # ranks that leave the group after this step
    regroup: bool  # the group must re-form after this step (someone joins)
    sqnorms: list[float] | None = None  # |g_j|^2 per micro-batch (measured steps only)
    mean_sqnorm: float | None = None  # |g|^2 of the exact mean gradient (measured steps)
    similarity: float | None = None  # cosine of the two halves' exact sums (when asked)
    link: dict | None = None  # compressed exchange: keep_ratio, sent_bytes, exchange_s, ...
    update: bool = True  # False: --pipeline had no earlier step's gradient to apply (step 0)


class PendingStep:
    """The step's collective in flight; `wait` gives its outcome, or None if the exact sum
    overflowed and the step must be computed again."""

    def __init__(self, reducer: StepReducer, in_flight: list):
        self.reducer, self.in_flight = reducer, in_flight

    def wait(self) -> StepOutcome | None:
        with peer_failures():
            for work in self.in_flight:
                work.wait()
        return self.reducer.finish()


class StepReducer:
    """Accumulates this worker's micro-batches and reduces a step across the group."""

    def __init__(
        self,
        model: torch.nn.Module,
        consistency: str,
        rank: int,
        world_size: int,
        measure: bool = False,
        exchange: SiteExchange | None = None,
    ):
        if consistency not in ("exact", "fast"):
            raise ValueError(f"consistency must be 'exact' or 'fast', got {consistency!r}")
        self.consistency, self.rank, self.world_size = consistency, rank, world_size
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buffers = list(model.buffers())
        self.device = self.params[0].device
        self.fixed = FixedPointAccumulator(self.params) if consistency == "exact" else None
        if self.fixed is None:  # fast: a flat float gradient, summed by autograd then all-reduced
            self.flat_grad = flat_gradients(self.params)
        self.num_buffer_bits = sum(bit_slots(b) for b in self.buffers)
        # gradient statistics for adaptive batch sizes: exact mode only (fast mode's autograd
        # sums the micro-batches' gradients before anyone could measure one)
        self.measure = measure and self.fixed is not None
        self._num_micro_batches = -1
        self.exchange = exchange  # sites.py: the compressed exchange across slow links
        self._update = True  # whether the step has a gradient to apply (see StepOutcome)
        if exchange is not None and (self.fixed is None or measure):
            raise UserError("--compress needs --consistency exact and a fixed batch size")

    @property
    def probing(self) -> bool:
        """Whether the pass begun is an exact-mode probe (another pass of the step follows)."""
        return self.fixed is not None and self.fixed.probing

    def begin(
        self, num_micro_batches: int, similarity: bool = False, step: int = 0, unscale: float = 1.0
    ) -> None:
        """Start a pass of `num_micro_batches` of `step`; `similarity`: also sum the first
        half apart; `unscale`: 1/S, for gradients of losses scaled by S (precision.py)."""
        self.unscale = unscale
        if num_micro_batches != self._num_micro_batches:
            self._num_micro_batches = num_micro_batches
            grad_ints = self.fixed.numel if self.fixed else 0
            self.scalars = StepScalars(num_micro_batches, self.world_size, self.measure)
            self.base = grad_ints + self.num_buffer_bits + self.scalars.size
            # the half-sum goes last, so a step without it sends the prefix buf[:base]
            halves = grad_ints if self.measure else 0
            self.buf = torch.zeros(self.base + halves, dtype=torch.int64, device=self.device)
            self.extra = self.buf[grad_ints : self.base]
        self.extra.zero_()  # the gradient's part is the accumulator's to reset
        # the pass's start (its compute time is what an exchange hides under) and its step
        self._began, self._step = time.perf_counter(), step
        self.losses: dict[int, float] = {}
        self.sqnorms: dict[int, torch.Tensor] = {}
        self.similarity = similarity and self.measure and num_micro_batches >= 2
        if self.fixed:
            half = self.buf[self.base :] if self.similarity else None
            self.fixed.begin(num_micro_batches, self.buf[: self.fixed.numel], half)
        else:
            self.flat_grad.zero_()

    def add(self, micro_batch: int, loss: float) -> None:
        """Fold the micro-batch just back-propagated into this worker's partial sum."""
        if self.fixed:
            if self.unscale != 1.0:  # each term unscaled: the grid never depends on S
                self.fixed.flat_grad.mul_(self.unscale)
            if self.measure:  # kept on the device: read once, when the message is packed
                g = self.fixed.flat_grad
                self.sqnorms[micro_batch] = torch.dot(g, g)
            self.fixed.add(micro_batch < self._num_micro_batches // 2)
        self.losses[micro_batch] = loss
        if micro_batch == 0 and self.buffers:
            self.extra[: self.num_buffer_bits] = torch.cat([bits_of(b) for b in self.buffers])

    def agree_bounds(self) -> bool:
        """After a probe pass: exact bounds are agreed and the step must be computed again
        (True). Fast mode never probes."""
        return bool(self.fixed and self.fixed.agree_bounds(self.world_size))

    def start(
        self, timing: tuple[float, float] | None, leaving: bool = False, regroup: bool = False
    ) -> PendingStep:
        """Send the step's message. `timing`: this worker's seconds per micro-batch at its
        kind's speed and at the host's; None if it computed nothing."""
        mine = self.scalars.pack(
            self.rank,
            self.losses,
            timing,
            leaving,
            regroup,
            bool(self.fixed and self.fixed.overflow),
            self._sqnorms(),
        )
        self.extra[self.num_buffer_bits :].copy_(torch.from_numpy(mine))
        message = self.buf if self.similarity else self.buf[: self.base]
        in_flight = []
        if self.exchange is not None:  # inside each site, then across sites (sites.py)
            compute_s = time.perf_counter() - self._began
            self._merged, rest = self.exchange.exchange(
                message, self.fixed.unit, compute_s, self._step
            )
            self.extra.copy_(rest)
            return PendingStep(self, in_flight)
        if self.world_size > 1:
            with peer_failures():
                if self.fixed is None:
                    in_flight.append(dist.all_reduce(self.flat_grad, async_op=True))
                in_flight.append(dist.all_reduce(message, async_op=True))
        return PendingStep(self, in_flight)

    def finish(self) -> StepOutcome | None:
        """Read the summed message: the mean gradient and buffers into the model, the scalars
        into an outcome; None if the exact sum must be recomputed."""
        nb = self.num_buffer_bits
        extra = self.extra.cpu()
        summed = extra[nb:].numpy()
        if self.fixed:
            if self.exchange is not None:
                if not self._settle_exchange(self.scalars.overflowed(summed)):
                    return None
            elif not self.fixed.settle(
                self.scalars.overflowed(summed), self.buf[: self.fixed.numel]
            ):
                return None
        else:
            self.flat_grad /= self._num_micro_batches
            if self.unscale != 1.0:  # autograd summed the scaled gradients: unscale the mean
                self.flat_grad.mul_(self.unscale)
        self._write_buffers(extra[:nb])
        outcome = self.scalars.outcome(summed)
        if self.measure:
            outcome.mean_sqnorm = self.fixed.mean_sqnorm()
        if self.similarity:
            total, half = self.buf[: self.fixed.numel], self.buf[self.base :]
            outcome.similarity = self.fixed.halves_cosine(total, half)
        if self.exchange is not None:
            outcome.link, outcome.update = self.exchange.record, self._update
        return outcome

    def _settle_exchange(self, any_overflow: bool) -> bool:
        """`FixedPointAccumulator.settle` for the compressed exchange: on an overflow the
        residuals go back and the step probes; else the merged gradient is the step's (with
        --pipeline: the previous step's, merged now; none at the first step)."""
        if any_overflow:
            self.exchange.rollback()
            self.fixed.probe_next = True
            return False
        pipeline = self.exchange.pipeline  # sites_pipeline.py
        merged = pipeline.advance(self.device) if pipeline else self._merged
        self._update = merged is not None
        if merged is None:  # nothing to apply: the trainer skips the optimizer's step
            self.fixed.flat_grad.zero_()
            return True
        self.fixed.flat_grad.copy_(merged)
        self.fixed.predict_bounds()
        return True

    def _sqnorms(self) -> dict[int, float] | None:
        """This worker's |g_j|^2, float64, read from the device in one transfer."""
        if not self.measure or not self.sqnorms:
            return None
        values = torch.stack(list(self.sqnorms.values())).to(torch.float64).tolist()
        return dict(zip(self.sqnorms, values, strict=True))

    def _write_buffers(self, bits: torch.Tensor) -> None:
        offset = 0
        for b in self.buffers:
            n = bit_slots(b)
            b.copy_(from_bits(bits[offset : offset + n].to(b.device), b))
            offset += n

    def state_dict(self) -> dict:
        state = self.fixed.state_dict() if self.fixed else {}
        if self.exchange is not None:  # residuals (and the controller): training state
            state = {**state, "sites": self.exchange.state_dict()}
        return state

    def load_state_dict(self, state: dict) -> None:
        if self.fixed:
            self.fixed.load_state_dict(state)
        if self.exchange is not None and "sites" in state:
            self.exchange.load_state_dict(state["sites"])
