"""Gradient clipping by total norm, on the gradient the optimizer is about to step with.

`Job.clip_grad_norm = max_norm` scales the step's gradient by max_norm / (norm + 1e-6) when
that is below 1, as `torch.nn.utils.clip_grad_norm_` does. Under `--consistency exact` every
worker holds that gradient bit for bit (the decoded exact mean) and computes its norm the same
way: each tensor's sum of squares in float64 (a float32 value's square is exact there), the
sums added in parameter order by `math.fsum`. So every worker scales by the same float32
factor, and the multiply is exact arithmetic wherever it runs. Like the adaptive batch's
gradient norm (`exact.py` `mean_sqnorm`), this relies on one reduction kernel giving the same
bits on every worker: workers of one device type and `--threads`. (torch's function sums in
the gradients' own dtype; the two agree to float32 rounding.)
"""

from __future__ import annotations

import math

import torch

EPSILON = 1e-6  # torch.nn.utils.clip_grad_norm_'s, against a zero norm


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Scale the gradients of `params` to a total L2 norm of at most `max_norm`; return the
    norm before clipping (NaN or inf if a gradient is not finite: then nothing is scaled)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    wide = [g.flatten().double() for g in grads]
    norm = math.sqrt(math.fsum(torch.stack([torch.dot(w, w) for w in wide]).tolist()))
    scale = max_norm / (norm + EPSILON)
    if math.isfinite(norm) and scale < 1.0:  # a non-finite step is --on-nonfinite's to handle
        factor = float(torch.tensor(scale, dtype=torch.float32))  # rounded once, used everywhere
        for g in grads:
            g.mul_(factor)  # (a float32 value: the product rounds once, in any precision)
    return norm
