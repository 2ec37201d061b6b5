"""Local-update mode (DiLoCo): H inner steps per site, then one outer step on the sites' average.

Sites are groups of workers joined by fast links; the links between sites are slow. In this
mode (`--local-steps H`) a step sums its gradient exactly inside each site only: every worker
of a site gets the site's exact mean gradient (over the micro-batches the site's workers
computed) and applies the job's own optimizer, so the sites' models drift apart. Only the
step's scalars (losses, timings, membership flags: a few hundred bytes) still cross the slow
links every step. Every H steps the sites meet: each site's pseudo-gradient (reference weights
- site weights) is averaged across sites by one exact all-reduce, an outer SGD step with
Nesterov momentum (`--outer-lr`, `--outer-momentum`, DiLoCo's 0.7 and 0.9) moves the reference,
and every site restarts from the new reference. A run ends with an outer step on the last
(possibly partial) round, so its final model is the one reference every worker holds.

Exactness: the pseudo-gradients are summed in int32 fixed point, on a per-tensor grid set by a
MAX all-reduce of their magnitudes (the idea of `exact.py`, on a coarser grid: 2**-29 of the
tensor's largest entry for two sites, so the slow link carries 4 bytes an entry, as for
float32), so the average has the same bits whatever the order of the sum. A run is
deterministic for a fixed assignment of micro-batches to sites: a replay of the same membership
history gives the same digest.

Sites: `--sites SPEC` where the configuration has it (issue 15's contract: worker indices,
"0,1/2,3"); else under torchrun one site per node (ranks are node-contiguous, LOCAL_WORLD_SIZE
per node); else (`shoal run`) one site, where the inner sum is the whole group's, as always.
The reference weights, the outer optimizer's momentum and the step of the last outer step are
training state (`state_dict`): checkpoints, peer transfer and --resume carry them. A membership
change inside a round continues every site from the transferring worker's site model (the
other sites' inner progress since the last outer step is not kept); the reference is shared,
so the next outer step is well defined.

Overlap (`--outer-overlap D`, DiLoCo with overlapping communication): at a round's end each
site starts the exact all-reduce of its pseudo-gradient in the background and goes on with the
next round's inner steps from its own weights; D inner steps later it waits for the mean, moves
the reference by the outer step and the site to new reference + (its weights now - its weights
when the exchange started), so the next pseudo-gradient again covers H inner steps. The
exchange in flight (that snapshot: the pseudo-gradient is reference - snapshot) is training
state; after any
membership change it is redone in the new group when it falls due (see `Pending`).

Why not torchft's DiLoCo: it is installable (torchft 0.2.0), but it drives its own quorum and
recovery (a Manager and a Lighthouse server) beside shoal's membership, and averages the
pseudo-gradient with a float all-reduce whose bits depend on the reduction order. The outer
optimizer itself is torch's own SGD (nesterov), so only the round's bookkeeping is written here.
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from shoal.config import SlowLinkConfig
from shoal.control.bandwidth import parse_sites
from shoal.errors import UserError
from shoal.runtime.membership import Group, collective, max_over_workers, peer_failures
from shoal.runtime.reduce import PendingStep, StepReducer
from shoal.runtime.sites import group_sites

# |sum| <= 2**30 keeps the sites' integers summed inside an int32: 4 bytes an entry on the
# slow link, as float32 would take, and still 2**-29 of the largest entry's size for 2 sites
INT_BITS = 30
# --outer-overlap sends the exchange in pieces of this many int32 entries (128 KiB): gloo runs
# at most two of a group's collectives at once, so at most ~2 x 64 KiB a direction wait in a
# slow link's queue (5-10 ms at 100 Mbit/s) ahead of each inner step's few hundred bytes;
# one 6 MB all-reduce fills the whole queue (tc tbf's 100 ms on the test bed) every step
CHUNK_ENTRIES = 1 << 15


def site_layout(spec: str | None, world_size: int) -> tuple[tuple[int, ...], ...]:
    """The sites as tuples of ranks: the spec if given, else one per torchrun node, else one."""
    if spec:
        return parse_sites(spec, world_size)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", 0) or 0)
    if "GROUP_RANK" in os.environ and 0 < per_node < world_size:
        # torchrun gives every node LOCAL_WORLD_SIZE ranks, numbered node by node
        return tuple(
            tuple(range(s, min(s + per_node, world_size))) for s in range(0, world_size, per_node)
        )
    return (tuple(range(world_size)),)


def grid_exponents(maxima: list[float], num_sites: int) -> list[int]:
    """Per tensor, the power of two that scales its values to integers: |x| < 2**e maps to
    at most 2**(30 - ceil(log2 S)), so the sum over S sites fits an int32."""
    p = INT_BITS - math.ceil(math.log2(max(num_sites, 1)))
    return [p - (math.frexp(m)[1] if m > 0 else 0) for m in maxima]


def quantize(flat: torch.Tensor, numels: list[int], exps: list[int]) -> torch.Tensor:
    """float32 values to int32 on the per-tensor grids (scaled in float64: one rounding)."""
    scale = torch.cat(
        [torch.full((n,), 2.0**e, dtype=torch.float64) for n, e in zip(numels, exps, strict=True)]
    )
    return flat.to(torch.float64).mul_(scale.to(flat.device)).round_().to(torch.int32)


def dequantize(
    summed: torch.Tensor, numels: list[int], exps: list[int], num_sites: int
) -> torch.Tensor:
    """The mean over sites, float32, from the exact integer sum (the same arithmetic anywhere)."""
    unit = torch.cat(
        [
            torch.full((n,), 2.0 ** (-e), dtype=torch.float64)
            for n, e in zip(numels, exps, strict=True)
        ]
    )
    mean = summed.to(torch.float64).mul_(unit.to(summed.device)).div_(num_sites)
    return mean.to(torch.float32)


class SiteReducer(StepReducer):
    """The step's reduce when the group spans several sites: the gradient part of the message
    is summed over the site's group only, the rest (buffers, scalars) over the whole group.
    The mean divides by the site's own number of micro-batches."""

    def __init__(self, model, consistency, rank, world_size, measure=False, *, site, group, counts):
        super().__init__(model, consistency, rank, world_size, measure=False)
        self.site, self.site_group, self.counts = site, group, counts
        self.site_micro_batches = 1
        if self.fixed:
            # the grid's room and its mean are the site's: only its micro-batches are summed
            begin = self.fixed.begin
            self.fixed.begin = lambda _, acc, half=None: begin(self.site_micro_batches, acc, half)

    def begin(
        self, num_micro_batches: int, similarity: bool = False, step: int = 0, unscale: float = 1.0
    ) -> None:
        counts = self.counts()
        self.site_micro_batches = max(1, sum(counts[r] for r in self.site))
        super().begin(num_micro_batches, False, step, unscale)

    def start(self, timing, leaving: bool = False, regroup: bool = False) -> PendingStep:
        overflow = bool(self.fixed and self.fixed.overflow)
        mine = self.scalars.pack(self.rank, self.losses, timing, leaving, regroup, overflow)
        self.extra[self.num_buffer_bits :].copy_(torch.from_numpy(mine))
        n = self.fixed.numel if self.fixed else 0
        in_flight = []
        with peer_failures():
            if self.site_group is not None:  # a one-worker site holds its sum already
                grad = self.buf[:n] if self.fixed else self.flat_grad
                in_flight.append(dist.all_reduce(grad, group=self.site_group, async_op=True))
            in_flight.append(dist.all_reduce(self.buf[n : self.base], async_op=True))
        return PendingStep(self, in_flight)

    def finish(self):
        outcome = super().finish()
        if outcome is not None and self.fixed is None:  # fast mode divided by the step's M
            self.flat_grad.mul_(self._num_micro_batches / self.site_micro_batches)
        return outcome


@dataclass
class Pending:
    """An outer exchange in flight (`--outer-overlap`): what it sends and what completes it.

    `snapshot` (the site's weights when the exchange started) is training state; the
    pseudo-gradient sent is reference - snapshot, the same bits again at any time, since the
    reference moves only when the exchange completes. `ints`, `exps` and `work` (the running
    all-reduce) are not: a state loaded, or a group changed, drops them and the exchange is
    redone in the group of the step it falls due, so its result depends only on the
    membership history."""

    launched_at: int
    snapshot: torch.Tensor
    ints: torch.Tensor | None = None
    exps: list[int] | None = None
    work: list | None = None  # the pieces' all-reduces in flight

    def state_dict(self) -> dict:
        return {"launched_at": self.launched_at, "snapshot": self.snapshot}


def overlap_apply(params, reference, snapshot: torch.Tensor) -> None:
    """Move each site parameter to new reference + (its value now - its value at the
    exchange's start): the inner steps taken while the exchange ran are kept on top of the
    outer step (float32, (p - s) + r, the same bits on every worker of a site)."""
    for p, r, s in zip(params, reference, _split(snapshot, params), strict=True):
        p.sub_(s).add_(r)


def _split(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    sizes = [t.numel() for t in like]
    return [f.view_as(t) for f, t in zip(torch.split(flat, sizes), like, strict=True)]


class LocalUpdate:
    """The outer loop of local-update mode for one worker: its site, the reference weights and
    the outer optimizer; `before_step` runs the outer step when a round is complete."""

    def __init__(self, trainer, config: SlowLinkConfig, peer_timeout_s: float = 30.0):
        if config.local_steps is None:
            raise ValueError("LocalUpdate needs --local-steps")
        if trainer.batch.measuring:
            raise UserError("--local-steps does not combine with an adaptive --batch-policy")
        self.local_steps = int(config.local_steps)
        self.sites_spec = getattr(config, "sites", None)  # issue 15's --sites, where present
        self.timeout = datetime.timedelta(seconds=peer_timeout_s)
        self.params = [p for p in trainer.model.parameters() if p.requires_grad]
        self.numels = [p.numel() for p in self.params]
        self.reference = [p.detach().clone() for p in self.params]
        mu = config.effective_outer_momentum
        self.outer = torch.optim.SGD(
            self.reference, lr=config.effective_outer_lr, momentum=mu, nesterov=mu > 0
        )
        self.synced_at = trainer.step  # the step boundary of the last outer step (or start)
        self.outer_steps = 0
        self.sites: tuple[tuple[int, ...], ...] = ((0,),)
        self.site, self.rank, self.world_size = 0, 0, 1
        self.overlap = config.outer_overlap  # D inner steps under the exchange; None: off
        self.pending: Pending | None = None
        self.exchange_group = None  # its own connections: the step's scalars do not queue

    # -- the group ---------------------------------------------------------------------------
    def reducer_for(self, trainer, group: Group):
        """The reducer class for this group (a SiteReducer when it spans sites); every rank
        creates every multi-worker site's process group, in the same order."""
        if self.sites_spec:  # workers named by the spec, a joiner placed as --compress places it
            self.sites = tuple(site.ranks for site in group_sites(group.ids, self.sites_spec))
        else:
            self.sites = site_layout(None, group.world_size)
        self.rank, self.world_size = group.rank, group.world_size
        self.site = next(i for i, s in enumerate(self.sites) if group.rank in s)
        # the worker's log says which layout it trains in (a wrong one trains, just worse)
        print(f"local-update: H={self.local_steps}, sites {self.sites}, this rank's site "
              f"{self.site}", file=sys.stderr, flush=True)  # fmt: skip
        if self.pending is not None:  # the old group's exchange: redone in this one
            self.pending.ints = self.pending.exps = self.pending.work = None
        if len(self.sites) == 1:
            return StepReducer
        mine = None
        for ranks in self.sites:
            if len(ranks) > 1:
                made = dist.new_group(list(ranks), timeout=self.timeout)
                mine = made if group.rank in ranks else mine
        if self.overlap:  # behind the step's scalars on one connection, they would wait for it
            ranks = list(range(group.world_size))
            self.exchange_group = dist.new_group(ranks, timeout=self.timeout)
        counts = lambda: trainer.rebalancer.plan.counts  # noqa: E731
        return functools.partial(SiteReducer, site=self.sites[self.site], group=mine, counts=counts)

    @property
    def leader(self) -> bool:
        return self.rank == self.sites[self.site][0]

    # -- the rounds --------------------------------------------------------------------------
    def before_step(self, trainer) -> bool:
        """At a round's end (H inner steps since the last outer step) take the outer step;
        True if it ran. Runs before the step computes, so a peer lost here leaves the state as
        it was at the boundary."""
        # (a state saved with an exchange in flight, resumed without --outer-overlap: now)
        due = self.pending and trainer.step - self.pending.launched_at >= (self.overlap or 0)
        if due:  # first, so that with D = H the round's exchange ends before the next starts
            self.complete()
        if trainer.step - self.synced_at < self.local_steps:
            return bool(due)
        if self.overlap:
            self.launch(trainer.step)
        else:
            self.outer_step(trainer.step)
        return True

    def finish(self, trainer) -> None:
        """The run's end: the exchange in flight completed, then an outer step on the last
        round, however short, so that every worker ends on the same reference."""
        if self.pending is not None:
            self.complete()
        if trainer.step > self.synced_at:
            self.outer_step(trainer.step)

    @torch.no_grad()
    def launch(self, step: int) -> None:
        """Start the round's exchange in the background (`--outer-overlap`); the site trains
        on from its own weights until it completes."""
        pending = Pending(step, torch.cat([p.detach().reshape(-1) for p in self.params]))
        self._send(pending)  # a peer lost here leaves the state as it was at the boundary
        self.pending, self.synced_at = pending, step

    def _send(self, pending: Pending) -> None:
        """The exchange's integers on their grid (the tiny MAX all-reduce stays synchronous),
        then their all-reduce, running while the inner steps go on."""
        if len(self.sites) == 1:
            return  # nothing crosses a link: the mean is the site's own
        pending.ints, pending.exps = self._integers(self.pseudo_gradient(pending))
        group = self.exchange_group
        with peer_failures():
            pending.work = [
                dist.all_reduce(piece, group=group, async_op=True)
                for piece in torch.split(pending.ints, CHUNK_ENTRIES)
            ]

    @torch.no_grad()
    def complete(self) -> None:
        """Wait for the exchange in flight (redo it here if the group changed since it
        started), take the outer step, and put the inner steps since on the new reference."""
        pending = self.pending
        assert pending is not None
        if len(self.sites) == 1:
            self.end_round(self.pseudo_gradient(pending))
            return
        if pending.work is None:  # started in another group, or loaded from a state
            self._send(pending)
        with peer_failures():
            for work in pending.work:
                work.wait()
        flat = dequantize(pending.ints, self.numels, pending.exps, len(self.sites))
        self.end_round(_split(flat, self.params))

    def pseudo_gradient(self, pending: Pending) -> list[torch.Tensor]:
        """The site's pseudo-gradient at the exchange's start: reference - weights then."""
        snapshot = _split(pending.snapshot, self.params)
        return [r - s for r, s in zip(self.reference, snapshot, strict=True)]

    @torch.no_grad()
    def end_round(self, mean: list[torch.Tensor]) -> None:
        """The overlapped round's end, given the sites' mean pseudo-gradient."""
        assert self.pending is not None
        self._outer(mean)
        overlap_apply(self.params, self.reference, self.pending.snapshot)
        self.pending, self.outer_steps = None, self.outer_steps + 1

    @torch.no_grad()
    def outer_step(self, step: int) -> None:
        deltas = [r - p.detach() for r, p in zip(self.reference, self.params, strict=True)]
        self._outer(self.site_mean(deltas))
        for p, r in zip(self.params, self.reference, strict=True):
            p.copy_(r)
        self.synced_at, self.outer_steps = step, self.outer_steps + 1

    def _outer(self, mean: list[torch.Tensor]) -> None:
        """The outer Nesterov step of the reference on the sites' mean pseudo-gradient."""
        for r, g in zip(self.reference, mean, strict=True):
            r.grad = g
        self.outer.step()
        for r in self.reference:
            r.grad = None

    def site_mean(self, deltas: list[torch.Tensor]) -> list[torch.Tensor]:
        """The sites' mean pseudo-gradient, exact: each site's leader contributes its integers
        (the other workers of a site hold the same values and send zeros)."""
        if len(self.sites) == 1:
            return deltas  # one site: the mean is its own, with no rounding at all
        ints, exps = self._integers(deltas)
        collective(dist.all_reduce, ints)
        mean = dequantize(ints, self.numels, exps, len(self.sites))
        return [m.view_as(d) for m, d in zip(torch.split(mean, self.numels), deltas, strict=True)]

    def _integers(self, deltas: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
        """This worker's share of the exact sum: its site's pseudo-gradient on the grids the
        group agrees on, from the site's leader (the other workers of a site send zeros)."""
        maxima = torch.stack([d.abs().max() for d in deltas]).float()
        max_over_workers(maxima)
        exps = grid_exponents(maxima.tolist(), len(self.sites))
        ints = quantize(torch.cat([d.reshape(-1) for d in deltas]), self.numels, exps)
        if not self.leader:
            ints.zero_()
        return ints, exps

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "reference": list(self.reference),
            "outer": self.outer.state_dict(),
            "synced_at": self.synced_at,
            "outer_steps": self.outer_steps,
            # --outer-overlap: the exchange in flight (absent when none is, or the mode is off)
            **({"pending": self.pending.state_dict()} if self.pending else {}),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict | None, step: int) -> None:
        """Adopt a saved outer state; None (a state saved without this mode): the reference
        restarts from the current model, with no momentum."""
        if state is None:
            for r, p in zip(self.reference, self.params, strict=True):
                r.copy_(p.detach())
            self.outer.state.clear()
            self.synced_at, self.outer_steps, self.pending = step, 0, None
            return
        for r, saved in zip(self.reference, state["reference"], strict=True):
            r.copy_(saved)
        self.outer.load_state_dict(state["outer"])
        self.synced_at, self.outer_steps = int(state["synced_at"]), int(state["outer_steps"])
        saved = state.get("pending")
        self.pending = None
        if saved is not None:  # redone in this group when it falls due (Pending)
            self.pending = Pending(int(saved["launched_at"]), saved["snapshot"].clone())
