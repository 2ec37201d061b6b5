"""The lazy optimizer step for sparse merged updates (`--compress` with `--sparse-optim lazy`).

With error feedback a site sends k entries of each tensor per step, so the merged update is
zero on most entries, and an entry that is sent carries the sum g of the gradients it gathered
since it was last sent. A dense step moves every entry each step: AdamW decays the moments of
the entries that got nothing and keeps stepping them on old moments, then normalises the one
large accumulated value away (a whole residual moves an entry by about one learning rate).
The lazy step (StellaTrain's CPU optimizer, torch's SparseAdam) changes only the entries the
step's merged update touched (the union of the sites' sent indices, `SiteExchange.touched`):
their weights and their optimizer state; the others keep every bit. It catches up: an entry
last changed s steps ago receives, in closed form, the s steps that the dense optimizer would
have taken on s gradients whose sum is g (measured: without this, lazy AdamW trains the
transformer worse than dense; with it, block top-k at keep 0.05 and 1/256 and `auto` reach
the uncompressed run's target on the slow-link bed).

Adam's catch-up needs the s gradients' mean square, which g does not carry: it lies between
q^2 (q = g / s, Cauchy-Schwarz: the s gradients all equal) and, when they are independent
noise around a small mean (|g| ~ sqrt(s) sigma), about g^2 / s = s q^2. The second moment is
fed s q^2: s steps of noise move a dense Adam by a random walk of about sqrt(s) learning
rates, and so does the catch-up (s steps of m / sqrt(v) ~ q / (|g| / sqrt(s)) = 1 / sqrt(s)).
Feeding q^2 instead moved a fresh entry by s learning rates at once: after the gaps of
hundreds of steps that keep 1/512 gives, the transformer diverged (`--compress auto`, val
loss 21.7; docs/notes/slow-links.md). The residuals EF sends are noise-dominated (measured:
the mean square over a gap is about s q^2 at keep 0.05), and an entry whose gradient is
steady moves by sqrt(s) rather than s learning rates: slower than dense, never an overshoot.
SGD needs no such estimate: its step is linear in the gradients, so s steps of q move an
entry as the s real gradients would, up to their order inside the gap.

Per touched entry, with the hyper-parameters read from the job's own optimizer's param_groups
at every step (a scheduler's learning rate and the batch policy's factor apply as usual),
q = g / s the mean gradient:
- Adam / AdamW: x <- x (1 - lr wd)^s (AdamW) or q <- q + wd x (Adam);
  m <- b1^s m + (1 - b1^s) q; v <- b2^s v + (1 - b2^s) s q^2 (s steps of mean square s q^2);
  x <- x - s lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), t the tensor's step;
- SGD: q <- q + wd x; with momentum mu and dampening d, the buffer after s steps of q,
  b_s = mu^s b + (1 - d) q (1 - mu^s) / (1 - mu), and x moves by lr times the sum of the s
  buffers (plus s q for Nesterov); without momentum x <- x - lr s q (plain EF-SGD).
The state is torch's own (`momentum_buffer`; `step`, `exp_avg`, `exp_avg_sq`: same keys,
shapes, dtypes) plus `last_step`, the tensor step at which each entry last changed (fp32,
exact below 2**24 steps), and for SGD a `step` count like Adam's, in the wrapped optimizer's
`state`: checkpoints, peer transfer and state digests carry it. While every entry is touched
every step (keep ratio 1: one site) the lazy step is the dense one, so it calls the
optimizer's own `step()`: bitwise the dense run. Elementwise arithmetic in a fixed index
order: deterministic. The step runs where the parameters are (the fp32 master weights; on
the CPU workers, the CPU). Amsgrad, a parameter that is not fp32 or an optimizer other than
SGD/Adam/AdamW is not supported (`supports`: the trainer then warns and keeps the dense step).
"""

from __future__ import annotations

import math
import warnings

import torch


def supports(optimizer: torch.optim.Optimizer) -> str | None:
    """None if the lazy step can drive `optimizer`, else why not (one line)."""
    if not isinstance(optimizer, (torch.optim.SGD, torch.optim.Adam)):
        return f"a lazy step for SGD, Adam and AdamW only, not {type(optimizer).__name__}"
    for group in optimizer.param_groups:
        if group.get("amsgrad", False):
            return "no lazy step for amsgrad"
        if any(p.dtype != torch.float32 for p in group["params"]):
            return "a lazy step updates fp32 parameters only"
    return None


class LazyStep:
    """Lazy steps of `optimizer` over `params` (the order of the exchange's flat mask)."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]):
        reason = supports(optimizer)
        if reason is not None:
            raise ValueError(reason)
        self.optimizer = optimizer
        self.params = params
        self.group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self.adam = isinstance(optimizer, torch.optim.Adam)  # AdamW is an Adam in torch >= 2.6

    @torch.no_grad()
    def step(self, touched: torch.Tensor | None) -> None:
        """One step; `touched`: a flat bool mask over `params` (None: every entry)."""
        # until a step is lazy every gap is 1, and with every entry touched the lazy step is
        # the dense one: the optimizer's own arithmetic (a keep-1 exchange later still
        # carries gaps > 1, the residuals flushed into it, so it stays lazy)
        was_lazy = any("last_step" in self.optimizer.state.get(p, {}) for p in self.params)
        if not was_lazy and (touched is None or bool(touched.all())):
            self.optimizer.step()
            return
        if touched is None:
            touched = torch.ones(sum(p.numel() for p in self.params), dtype=torch.bool)
        offset = 0
        for p in self.params:
            n = p.numel()
            mask = touched[offset : offset + n]
            offset += n
            if p.grad is not None:
                step = self._adam if self.adam else self._sgd
                step(p, mask.nonzero().flatten(), self.group_of[id(p)])
        assert offset == touched.numel(), "the mask covers exactly the exchanged parameters"

    def _tick(self, p: torch.nn.Parameter) -> float:
        """The tensor's step count, advanced: every tensor sends k >= 1 entries a step. A
        float32 scalar as torch's Adam keeps it; SGD's is ours, under the same key."""
        state = self.optimizer.state[p]
        if "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
        state["step"] += 1
        return float(state["step"])

    def _gaps(self, p: torch.nn.Parameter, idx: torch.Tensor, t: float) -> torch.Tensor:
        """Steps since each touched entry last changed (>= 1); records that it changes now."""
        state = self.optimizer.state[p]
        if "last_step" not in state:  # the tensor's first lazy step: all changed at the last
            state["last_step"] = torch.full_like(p, t - 1)
        last = state["last_step"].view(-1)
        gaps = t - last[idx]
        last[idx] = t
        return gaps

    def _sgd(self, p: torch.nn.Parameter, idx: torch.Tensor, group: dict) -> None:
        s = self._gaps(p, idx, self._tick(p))
        x, q = p.view(-1), p.grad.reshape(-1)[idx] / s
        if group.get("maximize", False):
            q = -q
        xi = x[idx]
        if group["weight_decay"]:
            q = q + group["weight_decay"] * xi
        mu = group["momentum"]
        if not mu:
            x[idx] = xi - group["lr"] * s * q
            return
        state = self.optimizer.state[p]
        if state.get("momentum_buffer") is None:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf = state["momentum_buffer"].view(-1)
        b0, c = buf[idx], 1 - group["dampening"]
        decay = mu**s
        grown = (1 - decay) / (1 - mu)  # sum of mu^j for j < s
        # b_j = mu^j b0 + c q (1 - mu^j) / (1 - mu); their sum over j = 1..s, in closed form
        total = b0 * mu * grown + c * q / (1 - mu) * (s - mu * grown)
        buf[idx] = decay * b0 + c * q * grown
        if group["nesterov"]:
            total = s * q + mu * total
        x[idx] = xi - group["lr"] * total

    def _adam(self, p: torch.nn.Parameter, idx: torch.Tensor, group: dict) -> None:
        state = self.optimizer.state[p]
        if "exp_avg" not in state:  # torch's own initial state
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        t = self._tick(p)
        s = self._gaps(p, idx, t)
        lr, wd = group["lr"], group["weight_decay"]
        (b1, b2), eps = group["betas"], group["eps"]
        x, q = p.view(-1), p.grad.reshape(-1)[idx] / s
        if group.get("maximize", False):
            q = -q
        xi = x[idx]
        decoupled = isinstance(self.optimizer, torch.optim.AdamW) or group.get(
            "decoupled_weight_decay", False
        )
        if wd and decoupled:
            xi = xi * (1 - lr * wd) ** s
        elif wd:
            q = q + wd * xi
        m, v = state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)
        d1, d2 = b1**s, b2**s
        mi = m[idx] * d1 + (1 - d1) * q
        # each of the s squares estimated as s q^2 = g^2 / s, not q^2 (the docstring): a noisy
        # residual then moves the entry ~sqrt(s) learning rates, as a dense Adam's random walk
        vi = v[idx] * d2 + (1 - d2) * (q * q * s)
        m[idx], v[idx] = mi, vi
        denom = vi.sqrt() / math.sqrt(1 - b2**t) + eps
        x[idx] = xi - (s * (lr / (1 - b1**t))) * mi / denom


def lazy_step(
    optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], link
) -> LazyStep | None:
    """The trainer's lazy step for a `--compress` run (`link`: its SlowLinkConfig), or None
    for the optimizer's own dense step (asked for, or not supported: with a warning)."""
    if link.effective_sparse_optim == "dense":
        return None
    reason = supports(optimizer)
    if reason is not None:
        warnings.warn(f"--sparse-optim lazy has no effect: {reason}", stacklevel=2)
        return None
    return LazyStep(optimizer, params)


__all__ = ["LazyStep", "lazy_step", "supports"]
