"""One worker's training loop: the step, with its data, forward/backward, exact reduce and update.

A step t runs M = B/b micro-batches. This worker computes the contiguous range the plan gives
it; for each micro-batch j it restores the step's initial buffers, takes the samples the data
order assigns to (t, j), seeds every random generator with (seed, t, j), runs forward and
backward (under the job's autocast, the loss scaled: precision.py), and folds the gradient into
the step's exact sum. One collective then gives every worker the same mean gradient, buffers,
losses and timings; every worker applies the same optimizer step and computes the same next
plan.

While the collective is in flight (an emulated slower kind: inside its device time, before
it joins the collective) the worker reads the micro-batches it will most likely compute in
the next step (its share under the current plan), so that reading stays off the step's
critical path. What a micro-batch reads, and the random draws of reading it, are pure
functions of (seed, t, j), so reading early never changes a bit of the result.

The step reads top to bottom in `Trainer.train_step`; a step whose exact sum is not usable
yet is computed again (exact.py decides when). Measured speeds are kept per worker id for
the trainer's life (one `Rebalancer`), so a regroup keeps what the workers that stay have
measured.

With an adaptive batch policy (`batching.py`) the step's message also carries the gradient
statistics the policy reads; after the step every worker feeds them to the policy, which may
choose a new M for the next step (`Rebalancer.resize`): the data stream simply continues from
`samples_seen`, so no sample is skipped or read twice. The policy's learning-rate factor is
applied around `optimizer.step()` only, so the user's scheduler never sees it.

With `--compress ... --pipeline` the gradient the step applies is the previous step's merged
one (`sites_pipeline.py`): its exchange ran under this step's compute. The first step has none to
apply, so neither the optimizer nor the scheduler steps (`StepOutcome.update`).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from shoal.config import BatchConfig, SlowLinkConfig
from shoal.control import Rebalancer
from shoal.control.gradstats import StepStats
from shoal.job import Job
from shoal.plan import DataOrder, Plan, data_seed, micro_batch_seed
from shoal.runtime.batching import AdaptiveBatch, BatchRecord
from shoal.runtime.built import built_model, built_optimizer, built_scheduler
from shoal.runtime.clipping import clip_grad_norm
from shoal.runtime.finite import MAX_PASSES, NonFiniteStep, check_step
from shoal.runtime.membership import Group, PeerFailure
from shoal.runtime.pacing import Pacer
from shoal.runtime.precision import LossScale, forward_backward
from shoal.runtime.reduce import StepOutcome, StepReducer
from shoal.runtime.repeatable import check_passes, check_reads
from shoal.runtime.sites import SiteExchange
from shoal.runtime.sparse_optim import lazy_step


def seed_everything(seed: int) -> None:
    # the generators' own manual_seed: torch.manual_seed seeds them the same way but costs
    # ~100 us a call, paid for every micro-batch
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def map_tensors(batch, fn: Callable[[torch.Tensor], torch.Tensor]):
    """`batch` with `fn` applied to every tensor in it (in lists, tuples, namedtuples, dicts:
    the structures default_collate builds)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(b, fn) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(b, fn) for b in batch)
    if isinstance(batch, dict):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    return batch


def to_device(batch, device: torch.device):
    return map_tensors(batch, lambda t: t.to(device, non_blocking=True))


def batch_reader(
    dataset, collate_fn: Callable[[list], object] | None = None
) -> Callable[[list[int]], object]:
    """`read(ids) -> batch`: the samples `ids` of `dataset`, collated, as torch's DataLoader
    reads a batch: through the dataset's `__getitems__` where it has one, else sample by
    sample. A TensorDataset under the default collate is indexed once per tensor instead:
    the same values (the rows, stacked) in about a sixth of the time."""
    if type(dataset) is torch.utils.data.TensorDataset and collate_fn is None:

        def read_rows(ids: list[int]) -> list[torch.Tensor]:
            index = torch.tensor(ids)
            return [t[index] for t in dataset.tensors]  # default_collate gives a list, too

        return read_rows
    collate = collate_fn or torch.utils.data.default_collate
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is not None:
        return lambda ids: collate(getitems(ids))
    return lambda ids: collate([dataset[i] for i in ids])


@dataclass
class StepRecord:
    step: int
    loss: float
    global_batch_size: int
    micro_batches: list[int]  # per worker
    seconds_per_micro_batch: list[float | None]  # per worker
    step_time_s: float
    redone: int  # exact-mode recomputations of this step (bound overflow)
    leaving: list[int]  # ranks leaving after this step
    regroup: bool  # the group re-forms after this step
    batch: BatchRecord = BatchRecord()  # noise scale, similarity, LR factor (adaptive batch)
    link: dict | None = None  # --compress: keep_ratio, sent_bytes, exchange_s, link_mbit_s
    skipped: bool = False  # non-finite: no update (--on-nonfinite skip)
    grad_norm: float | None = None  # Job.clip_grad_norm: the step's gradient norm, unclipped
    loss_scale: float | None = None  # Job.loss_scale: the scale the step's losses were scaled by


class Trainer:
    def __init__(
        self,
        job: Job,
        device: torch.device | str = "cpu",
        *,
        consistency: str = "exact",
        pacer: Pacer | None = None,
        replan_every: int = 5,
        max_micro_batches: int | None = None,
        batch: BatchConfig | None = None,
        on_nonfinite: str = "stop",
        link: SlowLinkConfig | None = None,
    ):
        self.job, self.device = job, torch.device(device)
        self.pacer = pacer or Pacer()
        seed_everything(micro_batch_seed(job.seed, -1, 0))  # identical initial weights everywhere
        self.model = built_model(job, self.device)
        self.optimizer = built_optimizer(job, self.model)
        self.scheduler = built_scheduler(job, self.optimizer)
        self.consistency = consistency
        self.on_nonfinite, self.nonfinite_skipped = on_nonfinite, 0  # see finite.py
        self.loss_scale = LossScale(job.loss_scale)  # precision.py (off unless the job sets one)
        self.max_micro_batches = max_micro_batches  # per worker per step; None: no cap
        # one for the trainer's life: measured speeds are kept by worker id across regroups
        self.rebalancer = Rebalancer(job.num_micro_batches, replan_every)
        self.batch = AdaptiveBatch(
            batch or BatchConfig(), job, consistency, self.rebalancer.throughput_model
        )
        self.reducer: StepReducer | None = None
        compressing = link is not None and link.compress != "none"
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.exchange = SiteExchange(trainable, link) if compressing else None  # sites.py
        self.lazy = lazy_step(self.optimizer, trainable, link) if compressing else None
        self.order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
        self.read_samples = batch_reader(job.dataset, job.collate_fn)
        self.step, self.samples_seen = 0, 0
        # micro-batches read, by (step, stream offset, index): this step's and the next's
        self._read: dict[tuple[int, int, int], tuple[list[int], object]] = {}
        self.on_samples = None  # optional callback(step, micro_batch, sample ids) on every use
        self.local = None  # local-update mode (local_update.py): set by the worker
        self.regroup(Group(0, 0, 1, ("w0",), ("native",), (1.0,)))

    def regroup(self, group: Group) -> None:
        """Train with a new group: new rank and world size; the training state is kept."""
        state = self.reducer.state_dict() if self.reducer else None
        self.rank, self.world_size = group.rank, group.world_size
        if self.exchange is not None:
            self.exchange.regroup(group)
        if self.local:  # local-update mode: a site's own sum (never with --compress)
            reducer = self.local.reducer_for(self, group)
            self.reducer = reducer(
                self.model, self.consistency, self.rank, self.world_size, self.batch.measuring
            )
        else:
            self.reducer = StepReducer(
                self.model,
                self.consistency,
                self.rank,
                self.world_size,
                self.batch.measuring,
                self.exchange,
            )
        if state is not None:
            self.reducer.load_state_dict(state)
        self._joined = group  # planned at the group's first step (a cap needs the real group)

    def _plan(self) -> Plan:
        if self._joined is not None:
            group, self._joined = self._joined, None
            caps = [self.max_micro_batches] * group.world_size
            cap = self._cap()
            if self.batch.measuring and cap is not None and self.rebalancer.num_micro_batches > cap:
                # an adaptive batch grown to fit a larger group: capped to what this one holds
                # (a fixed batch is the job's math, so it is never shrunk: the planner refuses)
                self.rebalancer.resize(cap)
            self.rebalancer.regroup(group.ids, group.priors, caps)
        return self.rebalancer.plan

    def train_step(self, leaving: bool = False, regroup: bool = False) -> StepRecord:
        """One optimizer step, top to bottom: compute this worker's share, send the step's
        collective, read the next step's share while it is in flight (an emulated kind: inside
        its device time, before it joins), wait, update, record."""
        start, plan = time.perf_counter(), self._plan()
        if self.local:  # local-update mode: a completed round's outer step first
            self.local.before_step(self)
        mine, redone = plan.indices(self.rank), 0
        similarity = self.batch.wants_similarity(self.step)
        bounds = self.reducer.state_dict()
        following = self.samples_seen + plan.num_micro_batches * self.job.micro_batch_size
        losses = {}  # the last pass's, which the next must repeat bit for bit
        try:
            while True:
                times = self._compute(mine, plan.num_micro_batches, similarity)
                check_passes(self.step, losses, self.reducer.losses)
                losses = self.reducer.losses
                busy_s = self._emulate(len(mine), sum(times), mine, following)
                if self.reducer.agree_bounds():  # a probe pass: bounds agreed, sum now
                    redone += 1
                    continue
                # host speed: the median micro-batch, as a warm cache runs it (see pacing.py)
                timing = (busy_s / len(mine), statistics.median(times)) if mine else None
                pending = self.reducer.start(timing, leaving, regroup)
                self._read_ahead(mine, following)  # done already if an emulated kind waited
                outcome = pending.wait()
                if outcome is not None or redone >= MAX_PASSES:
                    break
                redone += 1  # a gradient exceeded its fixed-point bound: probe, then sum again
            self.pacer.exchange()  # an emulated cluster's slower exchange (none by default)
            skip = check_step(self, outcome and outcome.losses, mine, plan.num_micro_batches)
        except (PeerFailure, NonFiniteStep):
            self.reducer.load_state_dict(bounds)  # back to this step's start, bit for bit
            raise
        batch = plan.num_micro_batches * self.job.micro_batch_size
        if skip:  # as AMP's scaler: no update, and the bounds as they were at the step's start
            self.reducer.load_state_dict(bounds)
        if skip or not outcome.update:  # (--pipeline's first step: nothing to apply yet)
            factor, norm = self.batch.lr_factor(batch, self._cap()), None
        else:
            factor, norm = self._optimizer_step(batch)
        step_s = time.perf_counter() - start
        record = self._record(plan, outcome, redone, step_s, factor, skip, norm)
        self.loss_scale.update(finite=not skip)  # after the record: it logs the step's own scale
        return record

    def check_reads(self) -> None:
        """Micro-batch 0 of step 0 must read the same when read again (repeatable.py)."""
        first, second = (self._micro_batch(0, 0, 0, consume=True)[1] for _ in range(2))
        check_reads(first, second)

    def _cap(self) -> int | None:
        """The most micro-batches the current group can hold per step (None: no cap)."""
        if self.max_micro_batches is None:
            return None
        return self.max_micro_batches * self.world_size

    def _optimizer_step(self, batch: int) -> tuple[float, float | None]:
        """The optimizer's step at the policy's learning-rate factor for this step's batch;
        the groups' own rates are put back after it, so the scheduler sees only its own.
        Returns the factor and, with Job.clip_grad_norm, the gradient's norm before clipping
        (None if not finite: the metrics are JSON)."""
        factor, norm = self.batch.lr_factor(batch, self._cap()), None
        if self.job.clip_grad_norm is not None:  # the same gradient, so the same scale, everywhere
            norm = clip_grad_norm(self.reducer.params, self.job.clip_grad_norm)
            norm = norm if math.isfinite(norm) else None
        if self.lazy is not None:  # --compress: only the entries the merged update touched
            step = lambda: self.lazy.step(self.exchange.touched)  # noqa: E731
        else:
            step = self.optimizer.step
        if factor == 1.0:
            step()
        else:
            rates = [group["lr"] for group in self.optimizer.param_groups]
            for group, lr in zip(self.optimizer.param_groups, rates, strict=True):
                group["lr"] = lr * factor
            try:
                step()
            finally:
                for group, lr in zip(self.optimizer.param_groups, rates, strict=True):
                    group["lr"] = lr
        if self.scheduler:
            self.scheduler.step()
        return factor, norm

    def _emulate(self, n: int, compute_s: float, mine: range, following: int) -> float:
        """An emulated slower kind reads ahead inside its device time, then waits out the
        rest; returns its busy seconds (the compute's, at the host's speed)."""
        target = self.pacer.target_s(n)
        if target is None:
            return compute_s
        started = time.perf_counter()
        self._read_ahead(mine, following)
        return self.pacer.wait_out(target, compute_s + time.perf_counter() - started)

    def _read_ahead(self, mine: range, following: int) -> None:
        for j in mine:  # the next step's share, if the plan stays as it is
            self._micro_batch(self.step + 1, following, j)

    def _record(
        self,
        plan: Plan,
        outcome: StepOutcome,
        redone: int,
        step_s: float,
        factor: float,
        skipped: bool = False,
        grad_norm: float | None = None,
    ) -> StepRecord:
        record = StepRecord(
            step=self.step,
            loss=sum(outcome.losses) / len(outcome.losses),
            global_batch_size=plan.num_micro_batches * self.job.micro_batch_size,
            micro_batches=list(plan.counts),
            seconds_per_micro_batch=outcome.seconds_per_micro_batch,
            step_time_s=step_s,
            redone=redone,
            leaving=outcome.leaving,
            regroup=outcome.regroup,
            link=outcome.link,
            skipped=skipped,
            grad_norm=grad_norm,
            loss_scale=self.loss_scale.scale if self.loss_scale.enabled else None,
        )
        self.rebalancer.after_step(self.step, outcome.seconds_per_micro_batch)
        # a skipped (non-finite) step's statistics are not fed to the batch policy
        record.batch = BatchRecord() if skipped else self._adapt(plan, outcome, record.loss, factor)
        # the host's speed is that of its fastest worker: an emulated kind paces against it
        host = [t for t in outcome.host_seconds_per_micro_batch if t is not None]
        if host:
            self.pacer.observe(min(host))
        self.step += 1
        self.samples_seen += record.global_batch_size
        self._read = {key: v for key, v in self._read.items() if key[0] >= self.step}
        return record

    def _adapt(self, plan: Plan, outcome: StepOutcome, loss: float, factor: float) -> BatchRecord:
        """Feed the step's exact statistics to the batch policy (on every worker: the same
        inputs, so the same decision); a new batch re-plans the next step with its M."""
        if not self.batch.measuring:
            return BatchRecord()
        b, M = self.job.micro_batch_size, plan.num_micro_batches
        stats = StepStats(
            step=self.step,
            micro_batch_size=b,
            num_micro_batches=M,
            sqnorms=tuple(outcome.sqnorms),
            mean_sqnorm=outcome.mean_sqnorm,
            similarity=outcome.similarity,
            loss=loss,
        )
        batch = self.batch.decide(stats, self._cap())
        if batch % b or batch < b:
            raise RuntimeError(f"batch policy chose {batch}, not a positive multiple of {b}")
        if batch != M * b:
            self.rebalancer.resize(batch // b)
        return BatchRecord(self.batch.noise.noise_scale, outcome.similarity, factor)

    def _compute(
        self, micro_batches: range, num_micro_batches: int, similarity: bool = False
    ) -> list[float]:
        """Forward/backward of this worker's micro-batches, back to back; returns the seconds
        each took. `similarity`: the step also sums its first half apart (adaptive batch)."""
        scale = self.loss_scale.scale  # 1.0 when the job sets none
        self.reducer.begin(num_micro_batches, similarity, self.step, self.loss_scale.inverse)
        initial = [b.clone() for b in self.model.buffers()]
        seconds = []
        for j in micro_batches:
            t0 = time.perf_counter()
            self._set_buffers(initial)  # every micro-batch starts from the step's buffers
            # a probe pass is followed by the summing one: it computes on a copy of the batch
            probe = self.reducer.probing
            ids, batch = self._micro_batch(self.step, self.samples_seen, j, consume=not probe)
            batch = map_tensors(batch, torch.Tensor.clone) if probe else batch
            if self.on_samples:
                self.on_samples(self.step, j, ids)
            seed_everything(micro_batch_seed(self.job.seed, self.step, j))
            loss = forward_backward(self.job, self.model, batch, self.device, scale)
            self.reducer.add(j, float(loss.detach()))
            seconds.append(time.perf_counter() - t0)
        self._set_buffers(initial)  # a recomputation must start from the same buffers
        return seconds

    def _set_buffers(self, values: list[torch.Tensor]) -> None:
        for b, v in zip(self.model.buffers(), values, strict=True):
            b.copy_(v)

    def _micro_batch(
        self, step: int, offset: int, j: int, consume: bool = False
    ) -> tuple[list[int], object]:
        """The sample ids and the batch of micro-batch j of the step at stream offset `offset`
        (augmentation draws from generators seeded with (seed, step, j)), read ahead once and
        kept until `consume`d: the loss function gets it then and may change it in place, as
        it may a DataLoader's batch, so a second pass of the step (a probe, a redone step)
        reads it again rather than reuse what the first pass left."""
        key = (step, offset, j)
        if key not in self._read:
            ids = self.order.sample_ids(offset, j)
            seed_everything(data_seed(self.job.seed, step, j))
            batch = self.read_samples(ids)
            self._read[key] = ids, to_device(batch, self.device)
        return self._read.pop(key) if consume else self._read[key]
