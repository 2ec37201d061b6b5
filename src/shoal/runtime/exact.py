"""Exact, order-independent summation of micro-batch gradients in fixed point.

Float addition is not associative, so a float all-reduce gives results that depend on which
worker summed which micro-batches, and in which order. Here every micro-batch gradient is
rounded once to a fixed-point grid and the integers are summed in int64, which is exact and
associative: the step's sum is the same bit pattern for any number of workers, any assignment
of micro-batches and any reduction order.

Per tensor k the grid is 2**(E_k - P): E_k bounds the tensor's magnitude (|g| <= 2**E_k) and
P = 62 - ceil(log2 M) leaves room for M terms in an int64. Rounding g * 2**(P - E_k) to an
integer is exact in float32 (a power-of-two scale only moves the exponent) apart from the final
round-half-even. The gradient mean is (sum of integers) * (2**(E_k - P) / M), computed in
float64 and rounded to float32, the same arithmetic in every layout.

E_k must be the same everywhere, and must not depend on the layout. It is predicted from the
previous step's mean gradient, which every worker holds bit for bit: E_k = exponent of
max|mean_k| + MARGIN_BITS, kept unchanged while the new prediction lies within SLACK_BITS below
it (so the grid is rebuilt only when the gradient's scale really moves). A micro-batch whose
integers would exceed 2**P raises an overflow flag that travels with the sum; the step is then
recomputed in a *probe* pass that only records each tensor's largest magnitude, a MAX
all-reduce sets E_k from the exact global maximum, and a last pass sums. The first step, with
no prediction, starts with the probe. Every outcome depends only on the gradients, never on the
layout, and a quantizing pass costs one range check per micro-batch, not one per tensor.

For adaptive batch sizes (gradient similarity) a pass may also sum, on the same grid, the
integers of the first half of the step's micro-batches (j < M//2) into a second accumulator:
the halves' sums are then exact too, and so is their cosine (`halves_cosine`).
"""

from __future__ import annotations

import math

import torch

from shoal.errors import UserError
from shoal.runtime.membership import max_over_workers

MARGIN_BITS = 8  # the bound sits 2**8 above the previous step's largest mean gradient
SLACK_BITS = 4  # ... or up to 2**4 higher still, rather than move by a bit or two every step
_MIN_SCALE_EXP = -126  # keep 2**(P - E) a normal float32: P - E <= 127
_MAX_SCALE_EXP = 127


def precision_bits(num_micro_batches: int) -> int:
    return 62 - math.ceil(math.log2(max(num_micro_batches, 1)))


class FixedPointAccumulator:
    """Owns the parameters' gradients as views of one flat buffer and sums them exactly."""

    def __init__(self, params: list[torch.nn.Parameter]):
        # the parameters are those of the job's model: the user's to change
        if not params:
            raise UserError("Job.model has no trainable parameters (none with requires_grad)")
        others = [name for name in dtype_names(params) if name != "float32"]
        if others:  # the grid's scaling is exact in float32 only (see the module docstring)
            raise UserError(
                f"Job.model's parameters must be float32 under --consistency exact, "
                f"got {', '.join(others)}"
            )
        self.params = params
        numels = [p.numel() for p in params]
        device = params[0].device
        self.numel = sum(numels)
        self.flat_grad = flat_gradients(params)
        self.numels = numels
        self.segment = torch.repeat_interleave(
            torch.arange(len(params), device=device), torch.tensor(numels, device=device)
        )
        self.scale = torch.empty_like(self.flat_grad)  # per element 2**(P - E_k), float32
        # per element 2**(E_k - P) / M: turns the integer sum into the mean (float64)
        self.unit = torch.empty(self.numel, dtype=torch.float64, device=device)
        self._mean = torch.empty_like(self.unit)
        self.bound_exp: torch.Tensor | None = None  # int64 per tensor; None until agreed
        self.nonfinite = torch.zeros(len(params), dtype=torch.bool, device=device)
        self.probe_next = False
        self._tmp = torch.empty_like(self.flat_grad)
        self._ints = torch.empty(self.numel, dtype=torch.int64, device=device)
        self._grid_for: tuple | None = None

    # -- one pass over this worker's micro-batches -------------------------------------------
    def begin(
        self, num_micro_batches: int, acc: torch.Tensor, half: torch.Tensor | None = None
    ) -> None:
        """Start a pass; `acc` (int64, numel) receives this worker's integer sum, and `half`
        (if given) that of its micro-batches in the step's first half."""
        self.num_micro_batches = num_micro_batches
        self.acc, self.half_acc = acc, half
        self.acc.zero_()
        if half is not None:
            half.zero_()
        self.flat_grad.zero_()
        self.overflow, self._summing = False, False
        # every worker takes the same branch: the bounds and the flag are the same everywhere
        self.probing = self.bound_exp is None or self.probe_next
        self.probe_next = False
        if self.probing:
            self.local_max = torch.zeros(len(self.params), device=self.flat_grad.device)
        else:
            self._make_grid()

    def add(self, in_half: bool = False) -> None:
        """Fold the gradient now in the parameters' .grad into this pass, then zero it;
        `in_half`: the micro-batch belongs to the step's first half (see `begin`)."""
        g = self.flat_grad
        if self.probing:  # only the largest magnitude of each tensor
            tensor_max = torch.zeros_like(self.local_max).scatter_reduce_(
                0, self.segment, g.abs(), "amax"
            )
            torch.maximum(self.local_max, tensor_max, out=self.local_max)
        elif not self.overflow:  # once overflowed, this pass is redone: stop spending on it
            q = torch.mul(g, self.scale, out=self._tmp).round_()
            if self._nonfinite_elems is not None:
                q.masked_fill_(self._nonfinite_elems, 0)
            low, high = torch.aminmax(q)
            if not bool((high <= self.limit) & (low >= -self.limit)):  # NaN fails the test
                self.overflow = True
            elif self._summing:
                self.acc += self._ints.copy_(q)
            else:  # the pass's first micro-batch: its integers are the sum so far
                self.acc.copy_(q)
            if in_half and self.half_acc is not None:
                self.half_acc += self._ints.copy_(q)
            self._summing = True
        g.zero_()

    # -- around the step's collective: the one place that decides a pass is not usable ---------
    def agree_bounds(self, world_size: int) -> bool:
        """Before the collective: if this pass was a probe, agree on exact bounds (a MAX
        all-reduce of each tensor's largest magnitude) and return True: a probe has no sum to
        reduce, and the step is computed again, summing."""
        if not self.probing:
            return False
        global_max = self.local_max.clone()
        if world_size > 1:
            max_over_workers(global_max)
        self.rebound(global_max)
        return True

    def settle(self, any_overflow: bool, summed: torch.Tensor) -> bool:
        """After the collective: `any_overflow` is the summed overflow flag (`self.overflow`
        of every worker). Decode the mean gradient and return True; or, if some worker's
        integers exceeded the bound, return False: the next pass probes, then sums again."""
        if any_overflow:
            self.probe_next = True
            return False
        self.decode(summed)
        return True

    # -- after the collective ----------------------------------------------------------------
    def decode(self, summed: torch.Tensor) -> None:
        """Write the exact mean gradient into the parameters' .grad; predict the next bound."""
        # int64 -> float64 (exact below 2**53, correctly rounded above), then the scale: the
        # same arithmetic as one mixed-dtype multiply, in three plain passes at a third of its cost
        self.flat_grad.copy_(self._mean.copy_(summed).mul_(self.unit))
        self.predict_bounds()

    def predict_bounds(self) -> None:
        """From the mean gradient now in .grad (decoded, or merged by the compressed exchange
        of `sites.py`): mark non-finite tensors, predict the next step's bounds."""
        if bool(self.nonfinite.any()):
            self.flat_grad[self.nonfinite[self.segment]] = math.nan
        magnitude = self.flat_grad.abs()
        # (a tensor of no elements has no max: 0, as it had in the probe's scatter)
        parts = torch.split(magnitude, self.numels)
        maxima = torch.stack([t.max() if t.numel() else t.new_zeros(()) for t in parts]).tolist()
        bounds = []
        for m, b in zip(maxima, self.bound_exp.tolist(), strict=True):
            e = self._exponent(m) + MARGIN_BITS
            # keep the bound while the prediction sits at most SLACK_BITS below it; a tensor
            # whose mean is all zeros (or NaN) keeps its bound
            bounds.append(b if not m > 0 or b - SLACK_BITS <= e <= b else e)
        self.bound_exp = self._as_tensor(bounds)

    def mean_sqnorm(self) -> float:
        """|g|^2 of the step's exact mean gradient (float64, before rounding to float32); the
        same bits on every worker, as the integer sum is."""
        return float(torch.dot(self._mean, self._mean))

    def halves_cosine(self, summed: torch.Tensor, half: torch.Tensor) -> float | None:
        """The cosine between the exact sums of the step's two halves (j < M//2 and the rest),
        from the summed integers (None if a half is zero or not finite)."""
        first = half.to(torch.float64).mul_(self.unit)
        second = (summed - half).to(torch.float64).mul_(self.unit)
        norms = float(torch.dot(first, first)) * float(torch.dot(second, second))
        if not (norms > 0 and math.isfinite(norms)):
            return None
        return float(torch.dot(first, second)) / math.sqrt(norms)

    def rebound(self, global_max: torch.Tensor) -> None:
        """Adopt exact bounds after a probe (global_max: per-tensor MAX over workers)."""
        self.nonfinite = ~torch.isfinite(global_max)
        safe = torch.where(self.nonfinite, torch.zeros_like(global_max), global_max)
        self.bound_exp = self._as_tensor([self._exponent(m) for m in safe.tolist()])

    # -- state (at step boundaries; restored as a whole when a step is abandoned) --------------
    def state_dict(self) -> dict:
        # references, not copies: both are replaced, never modified in place, so this is
        # cheap enough to take at every step (checkpoints copy it to the CPU themselves)
        return {"bound_exp": self.bound_exp, "nonfinite": self.nonfinite}

    def load_state_dict(self, state: dict) -> None:
        b = state.get("bound_exp")
        self.bound_exp = None if b is None else b.to(self.flat_grad.device)
        if state.get("nonfinite") is not None:
            self.nonfinite = state["nonfinite"].to(self.flat_grad.device)
        self.probe_next = False

    # -- helpers -------------------------------------------------------------------------------
    def _exponent(self, magnitude: float) -> int:
        """Smallest e with |x| <= 2**e, clamped so that the grid scale stays a normal float.

        Per tensor, on plain Python floats: a few dozen scalars, where tensor ops cost more.
        """
        p = precision_bits(self.num_micro_batches)
        lo, hi = p - _MAX_SCALE_EXP, p - _MIN_SCALE_EXP
        return min(max(math.frexp(magnitude)[1], lo), hi) if magnitude > 0 else lo

    def _as_tensor(self, exponents: list[int]) -> torch.Tensor:
        return torch.tensor(exponents, dtype=torch.int64, device=self.flat_grad.device)

    def _make_grid(self) -> None:
        p = precision_bits(self.num_micro_batches)
        exps = self.bound_exp.clamp(min=p - _MAX_SCALE_EXP, max=p - _MIN_SCALE_EXP).tolist()
        # M too, not only P: the unit divides by M, and M = 5..8 share one P
        key = (self.num_micro_batches, p, exps, self.nonfinite.tolist())
        if key == self._grid_for:
            return
        offset = 0
        for n, e in zip(self.numels, exps, strict=True):
            # 2**(P - E) is an exact, normal float32
            self.scale[offset : offset + n].fill_(2.0 ** (p - e))
            self.unit[offset : offset + n].fill_(2.0 ** (e - p) / self.num_micro_batches)
            offset += n
        self.limit = float(2**p)  # |integer| <= 2**p, so M of them fit in an int64
        self._nonfinite_elems = self.nonfinite[self.segment] if bool(self.nonfinite.any()) else None
        self._grid_for = key


def dtype_names(params: list[torch.nn.Parameter]) -> list[str]:
    """The parameters' dtypes by name ("float32"), each once, sorted."""
    return sorted({str(p.dtype).removeprefix("torch.") for p in params})


def flat_gradients(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One zeroed buffer whose slices are the parameters' .grad: autograd accumulates into it,
    and the step's arithmetic runs on one tensor instead of one per parameter."""
    dtypes = dtype_names(params)
    if len(dtypes) > 1:  # a .grad must have its parameter's dtype: no one flat buffer holds them
        raise UserError(
            f"Job.model's trainable parameters must share one dtype, got {', '.join(dtypes)}"
        )
    flat = torch.zeros(
        sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
    )
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat
