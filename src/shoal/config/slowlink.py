"""Training across slow links (issue 15), as configured: `SlowLinkConfig` and the check of a
site spec. Pure: no torch, no argparse."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shoal.config.fields import option
from shoal.digits import ascii_digits
from shoal.errors import UserError

# what a mode's setting is when its flag is not given (the field's None: "not given", so that a
# flag given without its mode is refused, not silently ignored)
SPARSE_OPTIM = "lazy"
OUTER_LR = 0.7
OUTER_MOMENTUM = 0.9


@dataclass(frozen=True)
class SlowLinkConfig:
    """Training across slow links (issue 15): which workers share a site, and how the sites'
    sums cross the links between them. Inside a site the exact dense sum runs as always;
    across sites either each site's leader sends a sparse message with error feedback every
    step (`--compress`, `runtime/sites.py`), or every site takes H optimizer steps on its own
    sum and then one outer Nesterov step on the sites' averaged pseudo-gradient (`--local-steps
    H`, DiLoCo, `runtime/local_update.py`). Neither set (the default): nothing changes."""

    sites: str | None = field(
        default=None,
        metadata=option(
            "--sites",
            "worker indices per site, e.g. 0,1/2,3 (default: one site; under torchrun one "
            "site per node); a worker the spec does not name joins site (index mod sites)",
            metavar="SPEC",
        ),
    )
    compress: str = field(
        default="none",
        metadata=option(
            "--compress",
            "across sites: none, topk:KEEP, blocktopk:KEEP (KEEP in (0, 1)), or auto (the "
            "bandwidth controller picks KEEP each step)",
            metavar="MODE",
        ),
    )
    sparse_optim: str | None = field(
        default=None,
        metadata=option(
            "--sparse-optim",
            "with --compress: lazy (only the entries the merged update touched change, their "
            "optimizer state too; SGD, Adam, AdamW) or dense (the job's optimizer as it is); "
            f"default {SPARSE_OPTIM}",
            metavar="KIND",
        ),
    )
    pipeline: bool = field(
        default=False,
        metadata=option(
            "--pipeline",
            "with --compress topk/blocktopk: staleness 1, step t's exchange across sites runs "
            "under step t+1's compute and its update is applied at the end of step t+1",
        ),
    )

    local_steps: int | None = field(
        default=None,
        metadata=option(
            "--local-steps",
            "local-update mode: H inner steps per site, then one outer step (default: off)",
            metavar="H",
        ),
    )
    outer_lr: float | None = field(
        default=None,
        metadata=option(
            "--outer-lr",
            f"with --local-steps: outer learning rate (default {OUTER_LR})",
            metavar="LR",
        ),
    )
    outer_momentum: float | None = field(
        default=None,
        metadata=option(
            "--outer-momentum",
            f"with --local-steps: outer Nesterov momentum (default {OUTER_MOMENTUM})",
            metavar="MU",
        ),
    )
    outer_overlap: int | None = field(
        default=None,
        metadata=option(
            "--outer-overlap",
            "local-update mode: the outer exchange runs under the next D inner steps, "
            "1 <= D <= H (default: off, the sites wait for it)",
            metavar="D",
        ),
    )

    def __post_init__(self) -> None:
        # the grammar only (config imports nothing but errors and digits); `control.bandwidth`'s
        # parse_compress / parse_sites give the worker its parsed values
        mode, _, keep = self.compress.partition(":")
        if mode in ("none", "auto") and not keep and not _:
            pass
        elif mode in ("topk", "blocktopk") and keep:
            try:
                ratio = float(ascii_digits(keep))
            except ValueError:
                raise UserError(f"--compress {self.compress}: KEEP must be a number") from None
            if not 0.0 < ratio < 1.0:
                raise UserError(f"--compress keep ratio must be in (0, 1), got {keep}")
        else:
            raise UserError(
                f"--compress must be none, topk:KEEP, blocktopk:KEEP or auto, got {self.compress!r}"
            )
        if self.sparse_optim not in (None, "lazy", "dense"):
            raise UserError(f"--sparse-optim must be lazy or dense, got {self.sparse_optim!r}")
        if self.sites is not None:
            _check_sites(self.sites)
        # local-update mode: the same words as control.bandwidth.validate_slow_link
        h = self.local_steps
        if h is not None and (int(h) != h or h < 1):
            raise UserError(f"--local-steps: local steps H must be an integer >= 1, got {h}")
        lr, mu = self.outer_lr, self.outer_momentum
        if lr is not None and not 0 < lr < math.inf:  # inf: the first outer step makes it inf
            raise UserError(f"--outer-lr must be > 0 and finite, got {lr}")
        if mu is not None and not 0 <= mu < 1:
            raise UserError(f"--outer-momentum must be in [0, 1), got {mu}")
        if self.pipeline and not self.compress.startswith(("topk:", "blocktopk:")):
            raise UserError("--pipeline needs --compress topk:KEEP or blocktopk:KEEP")
        # a mode's setting given without its mode would have no effect: refused, not ignored
        if self.sparse_optim is not None and self.compress == "none":
            raise UserError("--sparse-optim needs --compress")
        for flag, value in (("--outer-lr", lr), ("--outer-momentum", mu)):
            if value is not None and h is None:
                raise UserError(f"{flag} needs --local-steps")
        d = self.outer_overlap
        if d is not None and (h is None or int(d) != d or not 1 <= d <= h):
            raise UserError(f"--outer-overlap D needs --local-steps H and 1 <= D <= H, got {d}")
        if h is not None and self.compress != "none":
            raise UserError("--local-steps and --compress: choose one way across the links")

    @property
    def effective_sparse_optim(self) -> str:
        """--sparse-optim as a --compress run uses it: the flag's, else lazy."""
        return self.sparse_optim or SPARSE_OPTIM

    @property
    def effective_outer_lr(self) -> float:
        """--outer-lr as a --local-steps run uses it: the flag's, else 0.7."""
        return OUTER_LR if self.outer_lr is None else self.outer_lr

    @property
    def effective_outer_momentum(self) -> float:
        """--outer-momentum as a --local-steps run uses it: the flag's, else 0.9."""
        return OUTER_MOMENTUM if self.outer_momentum is None else self.outer_momentum

    def check_batch_policy(self, policy: str, source: str) -> None:
        """Refuse an adaptive batch policy with either way across the links, as the workers
        would (runtime/reduce.py, runtime/local_update.py), but before any of them starts: the
        policy is known only once the job is built (`source`: the flag, or the job's own)."""
        mode = "--compress" if self.compress != "none" else None
        mode = "--local-steps" if self.local_steps is not None else mode
        if policy != "fixed" and mode:
            raise UserError(f"{source} {policy} is adaptive: {mode} needs a fixed batch size")


def _check_sites(spec: str) -> None:
    """A site spec names workers 0..n-1, each in exactly one site, every site non-empty. The
    worker count is not known here (under torchrun, not before the workers start; a worker
    the spec leaves out joins a site by its index), so n is the count of names."""
    seen: set[int] = set()
    for i, part in enumerate(spec.split("/")):
        names = [w.strip() for w in part.split(",")]
        if not any(names):
            raise UserError(f"--sites: site {i} of {spec!r} names no worker")
        for w in names:
            # ASCII digits only: int() also takes "+1", "1_0", " 1" and other scripts' digits
            if not (w.isascii() and w.isdigit()):
                what = "an empty item" if not w else f"{w!r}"
                raise UserError(f"--sites {spec!r}: site {i} has {what}, not a worker index")
            if int(w) in seen:
                raise UserError(f"--sites {spec!r} names worker {int(w)} twice")
            seen.add(int(w))
    if max(seen) >= len(seen):  # distinct indices from 0: one is missing below the largest
        gap = next(w for w in range(len(seen)) if w not in seen)
        raise UserError(f"--sites {spec!r} leaves out worker {gap}: workers are numbered from 0")
