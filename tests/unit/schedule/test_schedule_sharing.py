"""One object reached by two paths, and one sync applied twice (single process).

A submodule held by two parents is replaced on both paths (by `sync`, `decompose`,
`checkpoint`, once by `replace_all`); a weight tied between two modules resizes both when it
is sharded; a second string `sync` in the same mode on one module is refused, also through
another path."""

import copy
import pathlib
import sys

import pytest
import torch
from torch import nn

import shoal.schedule as slapo
from shoal.schedule.op import LinearWithSeparateBias, LinearWithSyncFunc

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sched_models import MLP, Shared  # noqa: E402

X = torch.randn(3, 8)


def _same_output_and_input_grad(ref: nn.Module, model: nn.Module) -> None:
    outs = []
    for m in (ref, model):
        x = X.clone().requires_grad_()
        out = m(x)
        out.square().sum().backward()
        outs.append((out, x.grad))
    torch.testing.assert_close(outs[1], outs[0])


def test_a_module_reachable_by_two_paths_is_replaced_on_both():
    ref = Shared()
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    b = sch["inner.b"]
    sch["fc2"].shard("weight", axis=1)  # world size 1: the whole weight, a partial output
    sch["fc2"].sync("fwd_post", "all_reduce")  # a biased row-parallel Linear is swapped
    assert isinstance(model.fc2, LinearWithSyncFunc) and model.inner.b is model.fc2
    assert sch["inner.b"] is b and b.mod is model.fc2  # the node (and its metadata) is kept
    sch["fc1"].decompose()
    assert isinstance(model.inner.a, LinearWithSeparateBias) and model.inner.a is model.fc1
    sch["inner.a"].checkpoint()
    assert isinstance(model.fc1, slapo.CheckPointWrapper) and model.inner.a is model.fc1
    with pytest.raises(slapo.ScheduleError, match="on 'fc1': module is already checkpointed"):
        sch["fc1"].checkpoint()
    _same_output_and_input_grad(ref, model)


def test_replace_all_wraps_a_shared_module_once():
    ref = Shared()
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    count = sch.replace_all(nn.Linear, lambda path, mod: slapo.CheckPointWrapper(mod))
    assert count == 2  # fc1 and fc2, each reachable by two paths
    for name in ("fc1", "fc2"):
        wrapper = getattr(model, name)
        assert isinstance(wrapper, slapo.CheckPointWrapper)
        assert isinstance(wrapper.mod, nn.Linear)  # not a wrapper of a wrapper
    assert model.inner.a is model.fc1 and model.inner.b is model.fc2
    _same_output_and_input_grad(ref, model)


def test_sharding_a_tied_weight_resizes_every_holder():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32, 16)
            self.head = nn.Linear(16, 32, bias=False)
            self.head.weight = self.emb.weight

    sch = slapo.create_schedule(Tied())
    head = sch["head"]
    head.world_size = 2  # pretend to be rank 0 of 2: keep half of the vocabulary
    head.shard("weight", axis=0)
    emb = sch.mod.emb
    assert emb.weight is sch.mod.head.weight and emb.weight.shape == (16, 16)
    assert sch.mod.head.out_features == 16 and emb.num_embeddings == 16


def test_a_second_string_sync_in_one_mode_is_refused():
    ref = MLP()
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    fc1, fc2 = sch["fc1"], sch["fc2"]
    fc1.shard(["weight", "bias"], axis=0)
    fc1.sync("bwd_post", "all_reduce")
    fc1.sync("fwd_post", "all_gather", axis=1)  # another mode on the same module: fine
    with pytest.raises(slapo.ScheduleError, match=r"on 'fc1': .*already has a 'bwd_post' sync"):
        fc1.sync("bwd_post", "all_reduce")
    fc2.shard("weight", axis=1)
    with pytest.raises(slapo.ScheduleError, match="all_gather needs axis"):
        fc2.sync("fwd_post", "all_gather")  # refused, so it does not count as applied
    fc2.sync("fwd_post", "all_reduce")
    with pytest.raises(
        slapo.ScheduleError,
        match=r"sync\('fwd_post', 'RR->RS'\) on 'fc2': .*already has a 'fwd_post' sync",
    ):
        fc2.sync("fwd_post", "RR->RS")
    seen = []
    fc2.sync("fwd_post", lambda m, i, o: seen.append(o.shape))  # user hooks may be stacked
    fc2.sync("fwd_pre", "RR->RR")
    _same_output_and_input_grad(ref, model)
    assert seen == [torch.Size([3, 8])]


def test_a_second_sync_through_another_path_is_refused():
    sch = slapo.create_schedule(Shared())
    sch["fc2"].shard("weight", axis=1)
    sch["fc2"].sync("fwd_post", "all_reduce")
    with pytest.raises(slapo.ScheduleError, match="on 'inner.b': .*already has a 'fwd_post'"):
        sch["inner.b"].sync("fwd_post", "all_reduce")
