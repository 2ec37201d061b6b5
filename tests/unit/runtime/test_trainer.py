"""The trainer reads each micro-batch once, ahead of its step, as a pure function of
(seed, step, index)."""

import torch
import torch.nn.functional as F

import shoal
from shoal.runtime.membership import Group
from shoal.runtime.reduce import StepScalars
from shoal.runtime.trainer import Trainer, batch_reader

B, b = 16, 4


class NoisyReads(torch.utils.data.Dataset):
    """Each read adds fresh random noise (an augmentation) and is counted."""

    def __init__(self, n: int = 40):
        self.x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0))
        self.y, self.reads = torch.arange(n) % 2, 0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        self.reads += 1
        return self.x[i] + torch.rand(3), self.y[i]


def job(dataset: NoisyReads) -> shoal.Job:
    return shoal.Job(
        model=lambda: torch.nn.Linear(3, 2),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=dataset,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=b,
        global_batch_size=B,
        seed=7,
    )


def test_each_micro_batch_is_read_once_the_next_step_during_the_collective():
    data = NoisyReads()
    trainer = Trainer(job(data))
    records = [trainer.train_step() for _ in range(3)]
    # step 0 in exact mode is computed twice (a probe first), yet each micro-batch is read once
    assert [r.redone for r in records] == [1, 0, 0]
    assert data.reads == 4 * B  # steps 0-2, and step 3 read ahead during step 2's collective
    assert {step for step, _, _ in trainer._read} == {3}  # what was used is let go


def test_what_a_micro_batch_reads_ignores_when_and_after_what_it_is_read():
    first, second = Trainer(job(NoisyReads())), Trainer(job(NoisyReads()))
    ids, (x, y) = first._micro_batch(5, 3 * B, 2)
    torch.rand(100)  # other draws, and other micro-batches read first, change nothing
    for j in range(4):
        second._micro_batch(4, 2 * B, j)
    ids2, (x2, y2) = second._micro_batch(5, 3 * B, 2)
    assert ids == ids2 and torch.equal(x, x2) and torch.equal(y, y2)
    other_ids, (other, _) = first._micro_batch(6, 3 * B, 2)  # same samples, another step
    assert other_ids == ids and not torch.equal(other, x)


class Batched(NoisyReads):
    """A dataset that reads a whole batch at once, as DataLoader's `__getitems__` allows."""

    def __init__(self):
        super().__init__()
        self.batched_reads = []

    def __getitems__(self, ids: list[int]):
        self.batched_reads.append(list(ids))
        return [(self.x[i], self.y[i]) for i in ids]


def test_a_tensor_dataset_reads_the_same_batch_as_collating_its_samples():
    x = torch.randn(20, 2, 3, dtype=torch.float64)
    y = torch.arange(20)
    data = torch.utils.data.TensorDataset(x, y)
    ids = [7, 3, 3, 19, 0]
    fast = batch_reader(data)(ids)
    slow = torch.utils.data.default_collate([data[i] for i in ids])
    assert type(fast) is type(slow) is list and len(fast) == len(slow) == 2
    for a, s in zip(fast, slow, strict=True):
        assert a.dtype == s.dtype and a.stride() == s.stride() and torch.equal(a, s)


def test_a_reader_honours_getitems_and_a_custom_collate():
    data = Batched()
    x, y = batch_reader(data)([4, 1, 2])
    assert data.batched_reads == [[4, 1, 2]] and data.reads == 0
    assert torch.equal(x, data.x[[4, 1, 2]]) and torch.equal(y, data.y[[4, 1, 2]])
    tensors = torch.utils.data.TensorDataset(torch.arange(6.0))
    assert batch_reader(tensors, lambda samples: len(samples))([0, 5]) == 2  # not the fast path


def test_measured_speeds_survive_a_regroup_by_worker_id():
    trainer = Trainer(job(NoisyReads()), replan_every=1)
    for _ in range(3):
        trainer.train_step()
    measured = trainer.rebalancer.fit.measured_s("w0")
    assert measured is not None
    # w0 stays (now rank 1), w9 joins: w0's measurement is kept, w9 is estimated from it
    trainer.regroup(Group(1, 1, 2, ("w9", "w0"), ("native", "native"), (1.0, 1.0)))
    assert trainer.rank == 1 and trainer.world_size == 2
    plan = trainer._plan()  # the group's first step plans it
    fit = trainer.rebalancer.fit
    assert [fit.measured_s("w9"), fit.measured_s("w0")] == [None, measured]
    assert sum(plan.counts) == B // b and len(plan.counts) == 2


def test_the_step_scalars_read_back_by_name():
    layout = StepScalars(num_micro_batches=3, world_size=2)
    a = layout.pack(0, {0: 0.5, 1: 0.25}, (0.02, 0.01), leaving=False, regroup=True, overflow=False)
    c = layout.pack(1, {2: 2.0}, None, leaving=True, regroup=False, overflow=False)
    summed = a + c
    assert not layout.overflowed(summed)
    out = layout.outcome(summed)
    assert out.losses == [0.5, 0.25, 2.0]
    assert out.seconds_per_micro_batch == [0.02, None]
    assert out.host_seconds_per_micro_batch == [0.01, None]
    assert out.leaving == [1] and out.regroup
    flagged = summed + layout.pack(1, {}, None, leaving=False, regroup=False, overflow=True)
    assert layout.overflowed(flagged)


def _digest_after(loss_fn, dataset=None, steps: int = 3) -> str:
    from dataclasses import replace

    from shoal.runtime.state import state_sha256

    data = dataset or torch.utils.data.TensorDataset(
        torch.randn(40, 3, generator=torch.Generator().manual_seed(0)), torch.arange(40) % 2
    )
    trainer = Trainer(replace(job(NoisyReads()), dataset=data, loss_fn=loss_fn))
    for _ in range(steps):
        trainer.train_step()
    return state_sha256(trainer.model, trainer.optimizer)


def test_a_loss_function_may_change_its_batch_in_place():
    """As with a DataLoader's batch: step 0's probe pass and its summing pass each get the
    batch as read, so x.add_() in the loss is the same training as x + ... (it shifted the
    second pass's inputs twice; x.mul_(2) overflowed every pass into a false non-finite)."""

    def in_place(model, batch):
        x, y = batch
        x.mul_(2.0).add_(0.5)
        return F.cross_entropy(model(x), y)

    def out_of_place(model, batch):
        x, y = batch
        return F.cross_entropy(model(x * 2.0 + 0.5), y)

    assert _digest_after(in_place) == _digest_after(out_of_place)


def test_a_namedtuple_batch_reaches_the_loss_as_one():
    import collections

    Pair = collections.namedtuple("Pair", "x y")

    class Pairs(NoisyReads):
        def __getitem__(self, i: int):
            return Pair(self.x[i], self.y[i])

    seen = []

    def loss(model, batch):
        seen.append(type(batch))
        return F.cross_entropy(model(batch.x), batch.y)

    _digest_after(loss, Pairs(), steps=1)
    assert seen and set(seen) == {Pair}
