import numpy as np
import pytest

from shoal.errors import UserError
from shoal.plan import DataOrder, data_seed, micro_batch_seed


def test_sample_ids_are_pure_and_cover_each_epoch_once():
    order = DataOrder(dataset_size=10, micro_batch_size=2, seed=3)
    again = DataOrder(dataset_size=10, micro_batch_size=2, seed=3)
    ids = [i for j in range(5) for i in order.sample_ids(0, j)]
    assert sorted(ids) == list(range(10))
    assert ids == [i for j in range(5) for i in again.sample_ids(0, j)]
    # a step starting at offset 8 reads the end of epoch 0; one at 10, epoch 1 (permuted anew)
    crossing = order.sample_ids(8, 0)
    assert crossing[0] == order.permutation(0)[8] and crossing[1] == order.permutation(0)[9]
    assert order.sample_ids(10, 0) == [int(x) for x in order.permutation(1)[:2]]
    assert list(order.permutation(0)) != list(order.permutation(1))


@pytest.mark.parametrize(("size", "b"), [(10, 2), (7, 3), (5, 5), (6, 1)])
def test_a_micro_batch_reads_its_slice_of_the_epoch_stream(size, b):
    """The module's definition: the stream is the concatenation of per-epoch permutations and
    micro-batch j of the step at `offset` reads positions offset + j*b .. offset + (j+1)*b - 1,
    including micro-batches that span two epochs (7 samples, 3 per micro-batch) and a micro-batch
    as large as the dataset."""
    order = DataOrder(dataset_size=size, micro_batch_size=b, seed=11)
    stream = np.concatenate([order.permutation(e) for e in range(6)]).tolist()
    for offset in range(0, 3 * size):
        for j in range(3):
            start = offset + j * b
            assert order.sample_ids(offset, j) == stream[start : start + b], (offset, j)


def test_seeds_differ_per_step_and_micro_batch():
    seeds = {micro_batch_seed(0, t, j) for t in range(20) for j in range(8)}
    assert len(seeds) == 160
    assert micro_batch_seed(1, 0, 0) != micro_batch_seed(0, 0, 0)
    data = {data_seed(0, t, j) for t in range(20) for j in range(8)}
    assert len(data) == 160 and not data & seeds  # reading and forward draw apart


@pytest.mark.parametrize("seed", [0, -1, -(2**127), 2**127 - 1])
def test_every_seed_in_range_mixes_into_a_63_bit_seed(seed):
    for t, j in [(0, 0), (5, 3), (-1, 0)]:
        for value in (micro_batch_seed(seed, t, j), data_seed(seed, t, j)):
            assert 0 <= value < 2**63


def test_seeds_are_pinned_across_versions():
    """They choose every run's data, augmentation and dropout: a change would make a run
    resumed on a newer shoal train differently from the one it continues."""
    assert micro_batch_seed(0, 0, 0) == 2100330846382460146
    assert data_seed(0, 0, 0) == 7360031932313490177
    assert micro_batch_seed(-1, 5, 3) == 6717732807827680467
    assert data_seed(2**127 - 1, 7, 2) == 3049048357013840232


def test_dataset_smaller_than_a_micro_batch_is_refused():
    with pytest.raises(UserError, match="fewer than one micro-batch"):
        DataOrder(dataset_size=3, micro_batch_size=4, seed=0)
    with pytest.raises(UserError, match="micro_batch_size must be >= 1"):
        DataOrder(dataset_size=3, micro_batch_size=0, seed=0)
    # the smallest accepted: one sample per micro-batch, a dataset of exactly one micro-batch
    assert DataOrder(dataset_size=1, micro_batch_size=1, seed=0).sample_ids(5, 2) == [0]
    whole = DataOrder(dataset_size=4, micro_batch_size=4, seed=0)
    assert sorted(whole.sample_ids(4, 0)) == [0, 1, 2, 3]
