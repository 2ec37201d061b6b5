"""Single-process primitives: checkpoint, fuse, decompose, annotate, fork_rng, sync hooks,
build/init_empty_weights and Verify, plus the errors bad schedules raise."""

import copy
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal.schedule as slapo
from shoal.schedule.op import LinearWithSeparateBias
from shoal.schedule.pattern import call_module

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sched_models import MLP, Net  # noqa: E402

X = torch.randn(3, 8)


def _grads(model, x):
    x = x.clone().requires_grad_()
    out = model(x)
    out.square().sum().backward()
    return out, x.grad


def _copy(ref):
    """A copy of `ref` plus (ref param, copy param) pairs taken before any scheduling."""
    model = copy.deepcopy(ref)
    return model, list(zip(ref.parameters(), model.parameters(), strict=True))


def _same_training_step(ref, model, pairs=(), x=X):
    out_ref, gx_ref = _grads(ref, x)
    out, gx = _grads(model, x)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(gx, gx_ref)
    for p_ref, p in pairs:
        torch.testing.assert_close(p.grad, p_ref.grad)


def test_checkpoint_module_matches_and_wraps():
    ref = Net()
    model, pairs = _copy(ref)
    sch = slapo.create_schedule(model)
    sch["layers.0"].checkpoint()
    assert isinstance(sch.mod.layers[0], slapo.CheckPointWrapper)
    assert isinstance(sch["layers.0"].mod, slapo.CheckPointWrapper)
    _same_training_step(ref, sch.mod, pairs)
    with pytest.raises(slapo.ScheduleError, match="already checkpointed"):
        sch["layers.0"].checkpoint()


def test_checkpoint_passes_kwargs_in_order():
    class Add(nn.Module):
        def forward(self, a, b=None, scale=1.0):
            return (a + b) * scale

    wrapper = slapo.CheckPointWrapper(Add())
    a = torch.randn(2, requires_grad=True)
    out = wrapper(a, b=torch.ones(2), scale=2.0)
    torch.testing.assert_close(out, (a + 1) * 2)
    ordered = slapo.CheckPointWrapper(Add(), order_args_fn=lambda a, **kw: (a, kw["b"], 3.0))
    torch.testing.assert_close(ordered(a, b=torch.ones(2)), (a + 1) * 3)


def test_checkpoint_subgraph_creates_named_child():
    ref = MLP()
    model, pairs = _copy(ref)
    sch = slapo.create_schedule(model)
    (match,) = sch.find(lambda x: F.gelu(call_module("fc1", x)))
    sch.checkpoint(match)
    assert "CheckPointWrapper_0" in sch.child and "fc1" not in sch.child
    _same_training_step(ref, sch.mod, pairs)


def test_checkpoint_replays_dropout_mask():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 8))
    ref = copy.deepcopy(model)
    sch = slapo.create_schedule(model)
    sch["1"].checkpoint()
    torch.manual_seed(5)
    out_ref, gx_ref = _grads(ref, X)
    torch.manual_seed(5)
    out, gx = _grads(sch.mod, X)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(gx, gx_ref)


def test_checkpoint_replays_the_tensor_parallel_stream():
    def make():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 8))
        sch = slapo.create_schedule(model)
        sch["1"].fork_rng()  # dropout draws from the model-parallel stream
        return model, sch

    ref, _ = make()
    model, sch = make()
    sch.checkpoint()  # the whole model: recompute must redraw the same forked mask
    slapo.set_random_seed(3, tp_rank=1)
    out_ref, gx_ref = _grads(ref, X)
    after_ref = slapo.get_cuda_rng_tracker().get_states()
    slapo.set_random_seed(3, tp_rank=1)
    out, gx = _grads(sch.mod, X)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(gx, gx_ref)
    for p, p_ref in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, p_ref.grad)
    # and the stream advanced exactly as without checkpointing
    after = slapo.get_cuda_rng_tracker().get_states()
    torch.testing.assert_close(after["model-parallel-rng"][0], after_ref["model-parallel-rng"][0])
    slapo.set_random_seed(0)


@pytest.mark.parametrize("compiler", [None, "aot_eager", "TorchScript"])
def test_fuse_subgraph(compiler):
    ref = MLP()
    model, pairs = _copy(ref)
    sch = slapo.create_schedule(model)
    (match,) = sch.find(lambda x: F.gelu(call_module("fc1", x)))
    fused = sch.fuse(match, compiler=compiler, name="FusedModule")
    assert "FusedModule_0" in sch.child
    if compiler == "TorchScript":  # Slapo's semantics: the schedule holds the ScriptModule
        assert isinstance(fused, torch.jit.ScriptModule)
        assert isinstance(sch["FusedModule_0"].mod, torch.jit.ScriptModule)
        assert fused.original_name == "FusedModule" and not sch["FusedModule_0"].child
    else:
        assert type(fused).__name__ == "FusedModule"
    if compiler is None:
        assert isinstance(fused, nn.Sequential)  # a chain of modules
    _same_training_step(ref, sch.mod, pairs)


def test_fuse_rejects_a_single_node():
    sch = slapo.create_schedule(MLP())
    with pytest.raises(slapo.ScheduleError, match="fuse"):
        sch.fuse(sch.find(r"fc1"), compiler=None)


def test_decompose_then_fuse_bias_gelu():
    ref = MLP()
    model, pairs = _copy(ref)
    sch = slapo.create_schedule(model)
    sch["fc1"].decompose()
    assert isinstance(sch["fc1"].mod, LinearWithSeparateBias)
    sch.trace(flatten=True)
    found = sch.find(lambda x, bias: F.gelu(x + bias))
    assert len(found) == 1
    sch.fuse(found, compiler="aot_eager", name="BiasGeLU")
    assert "BiasGeLU_0" in sch.child
    _same_training_step(ref, sch.mod, pairs)


def test_decompose_rejects_non_linear_and_sharded():
    sch = slapo.create_schedule(MLP())
    with pytest.raises(slapo.ScheduleError, match="decompose on 'act'"):
        sch["act"].decompose()
    sch["fc1"].shard("weight", 0)  # world size 1: allowed, but decompose must come first
    with pytest.raises(slapo.ScheduleError, match="before shard"):
        sch["fc1"].decompose()


def test_annotate_tag_survives_shard():
    sch = slapo.create_schedule(MLP())
    sch["fc2"].annotate("bias", "replicated_param", True)
    sch["fc2"].shard("bias", 0)
    bias = sch.mod.fc2.bias
    assert bias.replicated_param is True and bias.orig_shape == (8,) and bias.shard_axis == 0
    assert "replicated_param" in sch.metadata.param_tags


def test_shard_keeps_tied_weights_tied():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    sch = slapo.create_schedule(Tied())
    sch["a"].shard("weight", 0)
    assert sch.mod.a.weight is sch.mod.b.weight
    sch["b"].shard("weight", 0)  # already sharded through `a`: no second split
    assert sch.mod.b.weight.shape == (4, 4)
    with pytest.raises(slapo.ScheduleError, match="already sharded along axis 0"):
        sch["b"].shard("weight", 1)


def test_fork_rng_uses_the_tensor_parallel_stream():
    drop = nn.Dropout(0.5)
    sch = slapo.create_schedule(nn.Sequential(drop))
    sch["0"].fork_rng()
    assert drop.traceable is False
    ones = torch.ones(64)
    slapo.set_random_seed(7, tp_rank=0)
    assert slapo.is_random_seed_set()
    forked = drop(ones)
    plain = F.dropout(ones, 0.5)  # the default stream did not advance
    slapo.set_random_seed(7, tp_rank=0)
    torch.testing.assert_close(F.dropout(ones, 0.5), plain)
    slapo.set_random_seed(7, tp_rank=1)
    assert not torch.equal(drop(ones), forked)  # another TP rank draws another mask
    slapo.set_random_seed(7, tp_rank=0)
    torch.testing.assert_close(drop(ones), forked)
    slapo.set_random_seed(7)
    assert not slapo.is_random_seed_set()


def test_sync_callable_and_reshard_hooks_single_process():
    sch = slapo.create_schedule(MLP())
    seen = []
    sch["fc1"].sync("fwd_post", lambda m, i, o: seen.append(o.shape))
    sch["fc2"].sync("fwd_pre", "RR->RS")  # identity with one process
    sch.mod(X)
    assert seen == [torch.Size([3, 16])]
    scaled = slapo.create_schedule(MLP())
    scaled["fc1"].sync("fwd_pre", "RR->RR")
    hook = next(iter(scaled.mod.fc1._forward_pre_hooks.values()))
    args, kwargs = hook(scaled.mod.fc1, (), {"input": X})  # keyword-only call is synced too
    assert args == () and kwargs["input"] is X
    with pytest.raises(slapo.ScheduleError, match="mode must be"):
        sch["fc1"].sync("fwd", "all_reduce")
    with pytest.raises(slapo.ScheduleError, match="unknown reshard"):
        sch["fc1"].sync("fwd_pre", "SS->RR")


def test_bad_schedules_raise_one_clear_error():
    sch = slapo.create_schedule(Net())
    fc = sch["layers.0.fc1"]
    fc.world_size = 3  # pretend to be one of 3 ranks: 16 rows cannot be split in 3
    with pytest.raises(slapo.ScheduleError) as info:
        fc.shard("weight", axis=0)
    msg = str(info.value)
    assert "shard('weight', axis=0) on 'layers.0.fc1'" in msg and "divisible" in msg
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
    with pytest.raises(slapo.ScheduleError, match="no parameter or buffer named 'wieght'"):
        sch["layers.0.fc2"].shard("wieght", axis=0)
    with pytest.raises(
        slapo.ScheduleError, match=r"sync\('fwd_post', 'all_reduce'\) on 'layers.0.fc2'"
    ):
        sch["layers.0.fc2"].sync("fwd_post", "all_reduce")  # unsharded: would multiply by p
    with pytest.raises(slapo.ScheduleError, match="all_gather needs axis"):
        sch["layers.0.fc2"].sync("fwd_post", "all_gather")
    with pytest.raises(slapo.ScheduleError, match="cut_pipeline_stage on 'layers.0'"):
        sch["layers.0"].cut_pipeline_stage()  # parent not traced
    row, col = sch["layers.1.fc2"], sch["layers.1.fc1"]
    row.shard("weight", axis=1)
    col.shard(["weight", "bias"], axis=0)
    with pytest.raises(slapo.ScheduleError, match="partial"):
        row.sync("fwd_post", "all_gather", axis=1)  # a partial sum cannot be gathered
    with pytest.raises(slapo.ScheduleError, match="partition"):
        col.sync("fwd_post", "reduce_scatter", axis=1)  # a partition cannot be summed
    with pytest.raises(slapo.ScheduleError, match="row-parallel"):
        row.sync("bwd_post", "all_reduce")
    col.sync("bwd_post", "all_reduce")  # valid: Megatron's "f" before a column split
    with pytest.raises(KeyError, match="layers.7"):
        sch["layers.7"].shard("weight", 0)


def test_reduce_scatter_keeps_the_bias_axis_of_a_row_parallel_layer_whole():
    # the bias is added once after the sum, so the sum must keep all of the bias's axis
    sch = slapo.create_schedule(nn.Sequential(nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3, bias=False)))
    for name in ("0", "1"):
        sch[name].shard("weight", axis=1)  # world size 1: the whole weight, a partial output
    with pytest.raises(slapo.ScheduleError, match=r"on '0': its bias .* all of axis 1"):
        sch["0"].sync("fwd_post", "reduce_scatter", axis=1)
    sch["0"].sync("fwd_post", "reduce_scatter", axis=2)  # rows of the image: fine
    sch["1"].sync("fwd_post", "reduce_scatter", axis=1)  # no bias: channels may be split
    linear = slapo.create_schedule(nn.Linear(4, 4))
    linear.shard("weight", axis=1)
    with pytest.raises(slapo.ScheduleError, match="all of axis -1"):
        linear.sync("fwd_post", "reduce_scatter", axis=-1)


def test_a_row_parallel_fused_linear_or_a_scattered_partial_sum_is_refused():
    from shoal.schedule.op.linear import LinearWithAct, LinearWithDropout

    fused = [LinearWithAct(4, 4, act_fn="relu"), LinearWithDropout(4, 4, p=0.1), nn.Linear(4, 4)]
    sch = slapo.create_schedule(nn.Sequential(*fused))
    for name in ("0", "1", "2"):
        sch[name].shard("weight", axis=1)  # world size 1: the whole weight, a partial output
    # relu(x_r @ W_r) summed over ranks is not relu(x @ W): no sync mends it
    with pytest.raises(slapo.ScheduleError, match="an activation to a partial sum"):
        sch["0"].sync("fwd_post", "all_reduce")
    with pytest.raises(slapo.ScheduleError, match="dropout to a partial sum"):
        sch["1"].sync("fwd_post", "all_reduce")
    with pytest.raises(slapo.ScheduleError, match="partial"):
        sch["2"].sync("fwd_post", "scatter", axis=-1)
    sch["2"].sync("fwd_post", "all_reduce")  # the plain row-parallel layer: fine


def test_init_empty_weights_and_build_materialize_on_cpu():
    with slapo.init_empty_weights():
        model = MLP()
    assert all(p.is_meta for p in model.parameters())
    sch = slapo.create_schedule(model)
    sch["fc1"].shard(["weight", "bias"], axis=0)
    built, optimizer = slapo.build(sch, init_weights=True)
    assert optimizer is None and built is model
    assert all(p.device.type == "cpu" for p in built.parameters())
    assert built.fc1.weight.abs().sum() > 0 and built.fc1.weight.shape == (16, 8)
    assert built(X).shape == (3, 8)
    with slapo.init_empty_weights():
        tied = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        tied[1].weight = tied[0].weight
    tied, _ = slapo.build(slapo.create_schedule(tied))
    assert tied[1].weight is tied[0].weight and not tied[0].weight.is_meta
    seen = []
    with slapo.init_empty_weights():
        other = MLP()
    slapo.build(slapo.create_schedule(other), init_weights=lambda mod, path: seen.append(path))
    assert "fc1" in seen
    with pytest.raises(slapo.ScheduleError, match="deepspeed"):
        slapo.build(slapo.create_schedule(MLP()), target="deepspeed")


def test_build_pipeline_checks_the_schedule_name_first():
    sch = slapo.create_schedule(MLP())  # neither traced nor cut: the name is checked before
    with pytest.raises(slapo.ScheduleError) as info:
        slapo.build(sch, target="pipeline", schedule="interleaved")
    msg = str(info.value)
    assert "'interleaved'" in msg and "['gpipe', '1f1b']" in msg and "<class" not in msg, msg


def test_verify_passes_for_a_correct_schedule():
    sch = slapo.create_schedule(MLP())
    with slapo.Verify(sch, [X]):
        sch["fc1"].decompose()
        sch["fc2"].checkpoint()


def test_verify_raises_for_a_wrong_schedule():
    sch = slapo.create_schedule(MLP())
    with pytest.raises(slapo.VerificationError, match="Verify") as info:
        with slapo.Verify(sch, [X]):
            sch["act"].replace(nn.ReLU())
    assert isinstance(info.value, AssertionError)
