"""The library schedules in one process (no tensor parallelism): fusion and checkpointing keep
the forward and the gradients of every model; FusedQKV computes exactly q, k and v."""

import copy

import pytest
import torch

from shoal.models import MODELS, get_model_entry
from shoal.schedule.model_schedule import apply_schedule, check_config
from shoal.schedule.model_schedule.ops import FusedQKV


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fusion_and_checkpointing_preserve_numerics(name):
    entry = get_model_entry(name)
    cfg = entry.make_config()
    torch.manual_seed(0)
    ref = entry.build(cfg)
    fusion = name != "wideresnet"
    sch = apply_schedule(copy.deepcopy(ref), name, ckpt_ratio=1.0, fusion=fusion)
    model = sch.mod
    wrapped = [n for n, m in model.named_modules() if type(m).__name__ == "CheckPointWrapper"]
    assert len(wrapped) == len(
        next(c for c in ref.children() if isinstance(c, torch.nn.ModuleList))
    )
    if fusion:
        assert any(isinstance(m, FusedQKV) for m in model.modules())
        assert not any(n.endswith("q_proj") for n, _ in model.named_modules())
    inputs = entry.make_inputs(cfg, 2, 8, torch.Generator().manual_seed(1))
    out_ref, out = ref(*inputs), model(*inputs)
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-5)
    entry.loss(out_ref, inputs).backward()
    entry.loss(out, inputs).backward()
    ref_params = dict(ref.named_parameters())
    head_dim = next((m.head_dim for m in ref.modules() if hasattr(m, "head_dim")), 0)
    for pname, p in model.named_parameters():
        pname = pname.replace(".mod.", ".")  # the checkpoint wrapper's extra path level
        if ".FusedQKV_0.qkv." in pname:
            owner, _, kind = pname.partition(".FusedQKV_0.qkv.")
            parts = [ref_params[f"{owner}.{x}_proj.{kind}"].grad for x in "qkv"]
            stacked = torch.stack(parts).unflatten(1, (-1, head_dim)).transpose(0, 1)
            expect = stacked.reshape(p.shape)  # head-major rows, as FusedQKV lays them out
        else:
            expect = ref_params[pname].grad
        torch.testing.assert_close(p.grad, expect, rtol=1e-4, atol=1e-6, msg=pname)


def test_fused_qkv_is_head_major_and_exact():
    torch.manual_seed(0)
    q, k, v = (torch.nn.Linear(8, 8) for _ in range(3))
    fused = FusedQKV.from_linears(q, k, v, head_dim=4)
    x = torch.randn(2, 3, 8)
    for got, lin in zip(fused(x), (q, k, v), strict=True):
        torch.testing.assert_close(got, lin(x))
    # Rows 0..11 belong to head 0 (its q, k, v), so an axis-0 half is whole heads.
    torch.testing.assert_close(fused.qkv.weight[4:8], k.weight[0:4])
    torch.testing.assert_close(fused.qkv.weight[12:16], q.weight[4:8])


def test_bad_ckpt_ratio_and_unknown_model_raise():
    model = get_model_entry("gpt2").build()
    with pytest.raises(ValueError):
        apply_schedule(model, "gpt2", ckpt_ratio=1.5)
    with pytest.raises(ValueError):
        apply_schedule(model, "resnet")


def test_gpt_without_biases_is_checkpointed_and_fused_on_one_rank():
    """The schedule refused bias=False although one rank shards nothing."""
    entry = get_model_entry("gpt2")
    cfg = entry.make_config(bias=False)
    torch.manual_seed(0)
    ref = entry.build(cfg)
    model = apply_schedule(copy.deepcopy(ref), "gpt2", ckpt_ratio=1.0, fusion=True).mod
    assert any(isinstance(m, FusedQKV) and m.qkv.bias is None for m in model.modules())
    inputs = entry.make_inputs(cfg, 2, 8, torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


def test_gpt_without_biases_is_refused_over_more_than_one_rank():
    cfg = get_model_entry("gpt2").make_config(bias=False)
    check_config("gpt2", cfg, 1)
    check_config("gpt2", get_model_entry("gpt2").make_config(), 2)
    with pytest.raises(ValueError, match="shards biases over more than one rank"):
        check_config("gpt2", cfg, 2)
