"""The fixed-point sum is exact: independent of partition and order, and close to the true mean."""

import random

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.runtime.exact import FixedPointAccumulator, precision_bits

SHAPES = [(3,), (2, 2), (5,)]


def _params():
    return [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]


def exact_mean(grads, partition, bounds=None, order_seed=0):
    """Reduce per-micro-batch grads [[tensor per param] per micro-batch] across simulated
    workers holding `partition` (lists of micro-batch indices); sum in a shuffled order."""
    m = len(grads)
    workers = [FixedPointAccumulator(_params()) for _ in partition]
    if bounds is not None:
        for w in workers:
            w.bound_exp = bounds.clone()
    while True:
        accs = []
        for w, mine in zip(workers, partition):
            acc = torch.zeros(w.numel, dtype=torch.int64)
            w.begin(m, acc)
            for j in mine:
                for p, g in zip(w.params, grads[j]):
                    p.grad.copy_(g)
                w.add()
            accs.append(acc)
        if workers[0].probing:  # every worker probes together: agree on exact bounds
            global_max = torch.stack([w.local_max for w in workers]).amax(0)
            for w in workers:
                w.rebound(global_max)
            continue
        random.Random(order_seed).shuffle(accs)
        total = torch.zeros_like(accs[0])
        for a in accs:
            total += a
        overflowed = any(w.overflow for w in workers)  # the summed flag
        if not all([w.settle(overflowed, total) for w in workers]):  # everyone probes next
            assert all(w.probe_next for w in workers)
            continue
        return workers[0].flat_grad.clone(), workers[0].bound_exp.clone()


magnitude = st.sampled_from([0.0, 1e-30, 1e-8, 1e-3, 1.0, 7.5, 1e4, 3e20])
value = st.builds(
    lambda s, m, f: s * m * f, st.sampled_from([-1.0, 1.0]), magnitude, st.floats(0.5, 2.0)
)


@st.composite
def micro_batch_grads(draw):
    m = draw(st.integers(1, 6))
    return [
        [
            torch.tensor(
                draw(st.lists(value, min_size=int(np.prod(s)), max_size=int(np.prod(s)))),
                dtype=torch.float32,
            ).reshape(s)
            for s in SHAPES
        ]
        for _ in range(m)
    ]


def _random_partition(m, workers, rng):
    owners = sorted(rng.randrange(workers) for _ in range(m))
    return [[j for j in range(m) if owners[j] == w] for w in range(workers)]


@settings(max_examples=150, deadline=None)
@given(grads=micro_batch_grads(), seed=st.integers(0, 10_000))
def test_sum_is_independent_of_partition_and_order(grads, seed):
    rng = random.Random(seed)
    m = len(grads)
    reference, bounds = exact_mean(grads, [list(range(m))])
    for _ in range(3):
        partition = _random_partition(m, rng.randint(1, m + 2), rng)
        got, got_bounds = exact_mean(grads, partition, order_seed=rng.random())
        assert torch.equal(got.view(torch.int32), reference.view(torch.int32))
        assert torch.equal(got_bounds, bounds)


@settings(max_examples=100, deadline=None)
@given(grads=micro_batch_grads())
def test_sum_is_close_to_the_true_mean(grads):
    m = len(grads)
    got, _ = exact_mean(grads, [list(range(m))])
    flat = np.stack([np.concatenate([g.numpy().ravel() for g in mb]) for mb in grads])
    true = flat.astype(np.float64).mean(0)
    offsets = np.cumsum([0] + [int(np.prod(s)) for s in SHAPES])
    for k in range(len(SHAPES)):
        seg = slice(offsets[k], offsets[k + 1])
        scale = np.abs(flat[:, seg]).max()
        # one rounding per term on a grid 2**-(P-1) below the tensor's largest value, then f32
        tol = scale * 2.0 ** -(precision_bits(m) - 1) + np.abs(true[seg]) * 2.0**-23
        assert np.all(np.abs(got.numpy()[seg] - true[seg]) <= tol + 1e-45)


def test_overflow_of_a_predicted_bound_is_detected_and_redone():
    grads = [[torch.full(s, 1.0) for s in SHAPES], [torch.full(s, 3.0) for s in SHAPES]]
    tight = torch.tensor([-5, -5, -5])  # far below the gradients: must overflow, then recover
    got, _ = exact_mean(grads, [[0], [1]], bounds=tight)
    assert torch.allclose(got, torch.full_like(got, 2.0))


def test_gradients_live_in_one_flat_buffer():
    model = torch.nn.Linear(3, 2)
    acc = FixedPointAccumulator(list(model.parameters()))
    model(torch.ones(4, 3)).sum().backward()
    assert acc.flat_grad.abs().sum() > 0  # backward accumulated into the views
    assert model.weight.grad.data_ptr() == acc.flat_grad.data_ptr()
