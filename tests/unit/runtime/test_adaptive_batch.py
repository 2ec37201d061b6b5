"""Adaptive global batch, the runtime side, in one process: the exact statistics equal a direct
computation, a new batch continues the sample stream, the LR factor touches only the optimizer's
step, and the policy's state round-trips bit for bit."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import shoal
from shoal.config import BatchConfig, RunConfig
from shoal.plan import DataOrder
from shoal.runtime.batching import policy_for
from shoal.runtime.exact import FixedPointAccumulator, precision_bits
from shoal.runtime.reduce import StepReducer
from shoal.runtime.state import load_training_state, state_sha256, training_state
from shoal.runtime.trainer import Trainer
from shoal.runtime.transfer import deserialize, serialize

b, B0, N = 4, 16, 40


def make_job(**extra) -> shoal.Job:
    x = torch.randn(N, 3, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, torch.arange(N) % 2)
    return shoal.Job(
        model=lambda: torch.nn.Linear(3, 2),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=data,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=b,
        global_batch_size=B0,
        seed=3,
        **extra,
    )


class Doubling:
    """A policy of the contract's shape that doubles the batch after step 0, then keeps it
    (within the cap)."""

    name, every = "doubling", 1

    def decide(self, stats, context):
        batch = stats.num_micro_batches * stats.micro_batch_size
        batch = 2 * batch if stats.step == 0 else batch
        cap = context.cap_micro_batches
        return batch if cap is None else min(batch, cap * stats.micro_batch_size)

    def lr_factor(self, batch, context):
        return batch / context.initial_batch

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def adaptive_trainer(policy=None, cap=None, **job_extra) -> Trainer:
    config = BatchConfig(policy="jabas", every=2)
    trainer = Trainer(make_job(**job_extra), max_micro_batches=cap, batch=config)
    if policy is not None:
        trainer.batch.policy = policy
    return trainer


def test_statistics_equal_a_direct_computation():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    M, xs = 6, [torch.randn(4, 5) for _ in range(6)]
    grads = []
    reducer = StepReducer(model, "exact", 0, 1, measure=True)
    for _ in range(2):  # a probe pass agrees the bounds, the second pass sums
        reducer.begin(M, similarity=True)
        for j, x in enumerate(xs):
            model(x).square().mean().backward()
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()]))
            reducer.add(j, 0.0)
        if not reducer.agree_bounds():
            break
    outcome = reducer.start(None).wait()
    g = grads[-M:]
    assert outcome.sqnorms == [float(torch.dot(gj, gj)) for gj in g]  # the same op, bit for bit
    mean = torch.stack(g).double().mean(0)
    assert outcome.mean_sqnorm == pytest.approx(float(mean @ mean), rel=1e-6)
    first, second = sum(g[: M // 2]).double(), sum(g[M // 2 :]).double()
    cosine = float(first @ second) / math.sqrt(float(first @ first) * float(second @ second))
    assert outcome.similarity == pytest.approx(cosine, abs=1e-6)


def test_the_exact_grid_follows_a_new_M_with_the_same_precision():
    params = [torch.nn.Parameter(torch.zeros(4))]
    acc = FixedPointAccumulator(params)
    total = torch.zeros(acc.numel, dtype=torch.int64)
    assert precision_bits(8) == precision_bits(5) == 59  # one P: only the unit's M differs
    means = []
    for M in (8, 8, 8, 5):  # a probe, two sums (the bound settles), then 5
        grads = [torch.full((4,), float(j + 1)) for j in range(M)]
        acc.begin(M, total)
        for g in grads:
            params[0].grad.copy_(g)
            acc.add()
        if not acc.agree_bounds(1):
            assert not acc.overflow and acc.settle(False, total)
            means.append(params[0].grad.clone())
    # the means of 1..M, exact on the grid: 4.5 twice, then 3.0 (the grid of M = 8 gives 1.875)
    assert [m.tolist() for m in means] == [[4.5] * 4, [4.5] * 4, [3.0] * 4]


@pytest.mark.parametrize("batches", [[4, 4, 12, 8, 20, 4, 16], [8, 24, 12, 40, 4]])
def test_the_stream_is_the_same_however_it_is_cut_into_steps(batches):
    order = DataOrder(N, b, seed=5)
    stream, offset = [], 0
    for batch in batches:  # micro-batches per step
        stream += [i for j in range(batch) for i in order.sample_ids(offset, j)]
        offset += batch * b
    straight = [i for j in range(offset // b) for i in order.sample_ids(0, j)]
    assert stream == straight
    for start in range(0, len(stream) - N + 1, N):  # each epoch: every sample once
        assert sorted(stream[start : start + N]) == list(range(N))


def test_a_new_batch_resizes_the_plan_and_continues_the_stream():
    trainer = adaptive_trainer(Doubling())
    seen = []
    trainer.on_samples = lambda step, j, ids: seen.append((step, j, ids))
    records = [trainer.train_step() for _ in range(4)]
    assert [r.global_batch_size for r in records] == [B0, 2 * B0, 2 * B0, 2 * B0]
    assert trainer.samples_seen == 7 * B0
    used = {(s, j): ids for s, j, ids in seen}  # a probe pass reads the same ids again
    order = DataOrder(N, b, seed=3)
    stream = [i for s in range(4) for j in range(records[s].global_batch_size // b)
              for i in used[(s, j)]]  # fmt: skip
    assert stream == [i for j in range(7 * B0 // b) for i in order.sample_ids(0, j)]


def test_a_batch_the_group_cannot_hold_is_capped():
    trainer = adaptive_trainer(Doubling(), cap=3)  # M = 4 micro-batches, the group holds 3
    assert [trainer.train_step().global_batch_size for _ in range(2)] == [3 * b, 3 * b]


def test_the_lr_factor_scales_the_step_only():
    scheduler = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)  # noqa: E731
    trainer = adaptive_trainer(Doubling(), lr_scheduler=scheduler)
    trainer.train_step()  # B0: factor 1
    before = [p.detach().clone() for p in trainer.model.parameters()]
    lr = trainer.optimizer.param_groups[0]["lr"]
    record = trainer.train_step()  # 2 B0: factor 2
    assert record.batch.lr_factor == 2.0 and lr == 0.05
    for p, p0 in zip(trainer.model.parameters(), before, strict=True):
        assert torch.allclose(p.detach(), p0 - 2.0 * lr * p.grad)
    assert trainer.optimizer.param_groups[0]["lr"] == 0.025  # the scheduler's own, unscaled
    assert trainer.scheduler.get_last_lr() == [0.025]


def test_the_policy_state_round_trips_bit_for_bit():
    bounds = {"batch_options": {"bounds": "8:32"}}
    first = adaptive_trainer(**bounds)
    for _ in range(5):
        first.train_step()
    second = adaptive_trainer(**bounds)
    load_training_state(second, deserialize(serialize(training_state(first))))
    assert second.batch.state_dict() == first.batch.state_dict()
    assert second.rebalancer.num_micro_batches == first.rebalancer.num_micro_batches
    for _ in range(4):
        assert first.train_step().global_batch_size == second.train_step().global_batch_size
    assert state_sha256(first.model, first.optimizer) == state_sha256(
        second.model, second.optimizer
    )


def test_flags_override_the_jobs_choice():
    job = make_job(batch_policy="jabas", batch_options={"bounds": "8:32", "every": 7})
    assert policy_for(BatchConfig(), job).name == "jabas"
    assert policy_for(BatchConfig(), job).every == 7
    assert policy_for(BatchConfig(policy="fixed", every=3), job).every == 3
    config = RunConfig(job="j.py", steps=1, out="o", batch=BatchConfig("pollux", options=["a=1"]))
    assert RunConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="--consistency exact"):
        policy_for(dataclasses.replace(BatchConfig(), policy="jabas"), make_job(), "fast")


def test_a_per_step_exchange_in_the_model_favours_larger_batches():
    # with no exchange, 64 samples take 4x the time of 16 (one worker, 4 micro-batches each):
    # equal throughput; an exchange of 2 micro-batches' time makes 64 twice as fast per sample
    plain = Trainer(make_job(), batch=BatchConfig(policy="pollux")).batch.throughput
    synced = Trainer(make_job(), batch=BatchConfig(policy="pollux", sync=2.0)).batch.throughput
    assert plain(64) == pytest.approx(plain(16))
    assert synced(64) / synced(16) == pytest.approx((4 + 2) / (16 + 2) * 4)
    with pytest.raises(ValueError, match="--batch-sync must be >= 0"):
        BatchConfig(sync=-1.0)
