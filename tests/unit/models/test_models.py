"""The model library: shapes, gradients, fx-traceability and the properties each model promises."""

import dataclasses

import pytest
import torch
import torch.fx as fx

from shoal.models import (
    MODELS,
    BertConfig,
    GPTConfig,
    LlamaConfig,
    WideResNetConfig,
    get_model_entry,
)
from shoal.models.llama import RotaryEmbedding

SEQ = {"gpt2": 8, "bert": 8, "llama": 8, "wideresnet": 8}


def _setup(name):
    torch.manual_seed(0)
    entry = get_model_entry(name)
    cfg = entry.make_config()
    model = entry.build(cfg)
    inputs = entry.make_inputs(cfg, 2, SEQ[name], torch.Generator().manual_seed(1))
    return entry, cfg, model, inputs


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_backward_reaches_every_parameter(name):
    entry, cfg, model, inputs = _setup(name)
    out = model(*inputs)
    if name == "wideresnet":
        assert out.shape == (2, cfg.num_classes)
    elif name == "bert":
        assert out.shape == (2, SEQ[name], cfg.hidden_size)
    else:
        assert out.shape == (2, SEQ[name], cfg.vocab_size)
    loss = entry.loss(out, inputs)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_trace_matches_eager(name):
    _, _, model, inputs = _setup(name)
    model.eval()
    if name == "bert":
        inputs = (inputs[0], torch.ones_like(inputs[0]), torch.zeros_like(inputs[0]))
    gm = fx.symbolic_trace(model)
    torch.testing.assert_close(gm(*inputs), model(*inputs))
    # Blocks are traceable one by one too (what schedules trace), down to their projections
    # or convolutions, the layers the schedules rewrite.
    blocks = next(c for c in model.children() if isinstance(c, torch.nn.ModuleList))
    assert len(blocks) > 0
    for block in blocks:
        graph = fx.symbolic_trace(block).graph
        targets = {n.target for n in graph.nodes if n.op == "call_module"}
        assert any(t.endswith("proj") or "conv" in t for t in targets), targets


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoders_are_causal(name):
    _, _, model, (idx,) = _setup(name)
    model.eval()
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 256
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_bert_padding_mask_hides_padded_tokens():
    _, _, model, (ids,) = _setup("bert")
    model.eval()
    mask = torch.ones_like(ids)
    mask[:, -2:] = 0
    other = ids.clone()
    other[:, -2:] = (other[:, -2:] + 7) % 256
    a, b = model(ids, mask), model(other, mask)
    torch.testing.assert_close(a[:, :-2], b[:, :-2])
    # Without the mask the padded tokens do leak into the others.
    assert not torch.allclose(model(ids)[:, :-2], model(other)[:, :-2])


def test_rotary_preserves_norm_and_depends_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, max_seq_len=16)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 8, generator=gen).expand(1, 1, 16, 8).contiguous()
    k = torch.randn(1, 1, 1, 8, generator=gen).expand(1, 1, 16, 8).contiguous()
    qr, kr = rope(q, k)
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1))
    scores = qr[0, 0] @ kr[0, 0].T
    for offset in (-3, 0, 3):  # q at t with k at t+offset: the same score for every t
        same = scores.diagonal(offset=offset)
        torch.testing.assert_close(same, same[0].expand_as(same))
    # ... and another score at another offset (no rotation at all would pass the above)
    firsts = [float(scores.diagonal(offset=d)[0]) for d in (-3, 0, 3)]
    assert min(abs(a - b) for a, b in [firsts[:2], firsts[1:], firsts[::2]]) > 1e-3, firsts
    # the rotate-half layout: pair (i, i + 4) turns by t / 10000 ** (i / 4) at position t
    z = torch.complex(q[0, 0, :, :4], q[0, 0, :, 4:])
    angle = torch.arange(16.0)[:, None] / 10000.0 ** (torch.arange(4.0) / 4)
    turned = z * torch.polar(torch.ones_like(angle), angle)
    torch.testing.assert_close(qr[0, 0], torch.cat([turned.real, turned.imag], dim=-1))


def test_wideresnet_depth_and_width():
    cfg = WideResNetConfig(depth=16, widen_factor=4)
    model = get_model_entry("wideresnet").build(cfg)
    assert len(model.blocks) == 3 * 2
    assert model.fc.in_features == 16 * 4 * 4


@pytest.mark.parametrize(
    "make",
    [
        lambda: GPTConfig(n_embd=30, n_head=4),
        lambda: GPTConfig(dropout=1.0),
        lambda: BertConfig(num_layers=0),
        lambda: LlamaConfig(dim=20, n_heads=4),  # odd head_dim cannot be rotated
        lambda: WideResNetConfig(depth=12),
        lambda: get_model_entry("gpt2").make_config(n_embed=64),
        lambda: get_model_entry("resnet"),
    ],
)
def test_bad_configs_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_make_config_refuses_a_wrong_type_naming_field_and_type(name):
    """vocab_size=1.5 was taken (every trial then failed inside torch); dropout="abc" was a
    TypeError from comparing a str with a float."""
    entry = get_model_entry(name)
    fields = {f.name: f.default for f in dataclasses.fields(entry.config_cls)}
    cls = entry.config_cls.__name__
    int_field = next(k for k, v in fields.items() if type(v) is int)
    for value in (1.5, "abc", True):
        with pytest.raises(ValueError, match=rf"^{cls}\.{int_field} must be an integer, got "):
            entry.make_config(**{int_field: value})
    float_field = next(k for k, v in fields.items() if type(v) is float)
    with pytest.raises(ValueError, match=rf"^{cls}\.{float_field} must be a number, got 'abc'"):
        entry.make_config(**{float_field: "abc"})
    cfg = entry.make_config(**{float_field: 0})  # an integer is a number
    assert getattr(cfg, float_field) == 0.0 and type(getattr(cfg, float_field)) is float


def test_make_config_takes_only_booleans_for_a_switch():
    entry = get_model_entry("gpt2")
    assert entry.make_config(bias=False).bias is False
    for value in (0, "false", None):
        with pytest.raises(ValueError, match=r"^GPTConfig\.bias must be true or false, got "):
            entry.make_config(bias=value)


def test_llama_hidden_dim_rule():
    assert LlamaConfig(dim=64, multiple_of=32).hidden_dim == 192
    assert LlamaConfig(intermediate_size=100).hidden_dim == 100
