"""Mixed precision: the loss function under torch.autocast, and a loss scale kept as torch's
GradScaler keeps one.

`Job.autocast = "float16"` (or "bfloat16") runs every micro-batch's loss function under
`torch.autocast(device type, dtype)`. Matrix products and convolutions then run in half
precision. Parameters, gradients and the optimizer stay float32, which the exact sum needs
(`exact.py`).

float16's narrow range lets small gradients vanish in the backward pass. `Job.loss_scale`
multiplies each micro-batch's loss by a scale S before backward. It multiplies the micro-batch's
gradient by 1/S (rounded to float32, as GradScaler's inverse is) before the gradient joins the
step's sum. So the sum, exact or not, holds unscaled gradients, and the fixed-point grid never
depends on S. With S a power of two (GradScaler's defaults keep it one) unscaling each term and
unscaling their sum give the same numbers, barring gradients below float32's normal range.

`"dynamic"`, or a dict of GradScaler's settings, follows `torch.amp.GradScaler`'s rule:
- a step whose mean gradient is not finite is skipped (no update), and S is multiplied by
  `backoff_factor`;
- after `growth_interval` finite steps in a row, S is multiplied by `growth_factor`.
The decision reads the step's mean gradient, which every worker holds (bit for bit in exact
mode). So every worker keeps the same S, whatever the layout, and S is training state:
checkpoints and transfers to joiners carry it. A step whose loss, not only its gradient, is not
finite is `--on-nonfinite`'s (scaling cannot cure a forward pass that overflowed); if that skips
the step, S backs off as well, as GradScaler's would. A fixed number scales by S and never
changes it; every non-finite step is then `--on-nonfinite`'s. In local-update mode each site
sums its own gradient, so each site keeps its own S, as each DiLoCo worker would keep its own
GradScaler.
"""

from __future__ import annotations

import contextlib
import math

import torch

from shoal.job import GRAD_SCALER, Job, loss_scale_settings
from shoal.runtime.built import scalar_loss


def float32(x: float) -> float:
    """`x` rounded to float32, as GradScaler's scale tensor holds it (inf past its range)."""
    return torch.tensor(x, dtype=torch.float32).item()


class LossScale:
    """The step's loss scale S and torch.amp.GradScaler's update rule."""

    def __init__(self, setting) -> None:
        settings = loss_scale_settings(setting)
        self.enabled = settings is not None
        # none set: a fixed S = 1, whose 1/S = 1 scales nothing
        settings = settings or {**GRAD_SCALER, "init_scale": 1.0, "dynamic": False}
        self.dynamic = settings["dynamic"]
        self.scale = float32(settings["init_scale"])
        self.growth, self.backoff = settings["growth_factor"], settings["backoff_factor"]
        self.interval = settings["growth_interval"]
        self.growth_tracker = 0  # finite steps in a row since S last changed
        self.backoffs = 0  # skipped steps that S backed off after

    @property
    def inverse(self) -> float:
        """1/S in float32 (GradScaler: the scale's float64 reciprocal, rounded to float32)."""
        return float32(1.0 / self.scale)

    def update(self, finite: bool) -> None:
        """After a step: back off if its gradient was not finite, else count towards growth
        (torch's `_amp_update_scale_`: a growth that would overflow float32 is not taken)."""
        if not self.dynamic:
            return
        if not finite:
            self.scale, self.growth_tracker = float32(self.scale * self.backoff), 0
            self.backoffs += 1
            return
        self.growth_tracker += 1
        if self.growth_tracker == self.interval:
            grown = float32(self.scale * self.growth)
            self.scale = grown if math.isfinite(grown) else self.scale
            self.growth_tracker = 0

    def state_dict(self) -> dict:
        return {
            "scale": self.scale,
            "growth_tracker": self.growth_tracker,
            "backoffs": self.backoffs,
        }

    def load_state_dict(self, state: dict | None) -> None:
        if state is None or not self.enabled:  # saved without a scale, or the job sets none
            return
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
        self.backoffs = int(state["backoffs"])


def forward_backward(
    job: Job, model: torch.nn.Module, batch, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    """Run the job's loss function on `batch` (under the job's autocast on `device`) and
    back-propagate the loss times `scale`; returns the unscaled loss."""
    dtype = getattr(torch, job.autocast) if job.autocast else None
    cast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    with cast:
        loss = scalar_loss(job.loss_fn(model, batch))
    (loss * scale if scale != 1.0 else loss).backward()
    return loss
