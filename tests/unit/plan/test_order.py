import pytest

from shoal.errors import UserError
from shoal.plan import DataOrder, micro_batch_seed


def test_sample_ids_are_pure_and_cover_each_epoch_once():
    order = DataOrder(dataset_size=10, micro_batch_size=2, seed=3)
    again = DataOrder(dataset_size=10, micro_batch_size=2, seed=3)
    ids = [i for j in range(5) for i in order.sample_ids(0, j)]
    assert sorted(ids) == list(range(10))
    assert ids == [i for j in range(5) for i in again.sample_ids(0, j)]
    # a step starting at offset 8 crosses into epoch 1, permuted differently
    crossing = order.sample_ids(8, 0)
    assert crossing[0] == order.permutation(0)[8] and crossing[1] == order.permutation(0)[9]
    assert order.sample_ids(10, 0) == [int(x) for x in order.permutation(1)[:2]]
    assert list(order.permutation(0)) != list(order.permutation(1))


def test_seeds_differ_per_step_and_micro_batch():
    seeds = {micro_batch_seed(0, t, j) for t in range(20) for j in range(8)}
    assert len(seeds) == 160
    assert micro_batch_seed(1, 0, 0) != micro_batch_seed(0, 0, 0)


def test_dataset_smaller_than_a_micro_batch_is_refused():
    with pytest.raises(UserError, match="fewer than one micro-batch"):
        DataOrder(dataset_size=3, micro_batch_size=4, seed=0)
