"""`tracer="huggingface"`: transformers' own fx tracer under the schedule's leaf rules.

A tiny GPT-2 built from a config (no weights downloaded); skipped without transformers."""

import copy

import pytest
import torch
from torch import fx

import shoal.schedule as slapo

transformers = pytest.importorskip("transformers")


def _gpt2():
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32, use_cache=False
    )
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).eval()
    return model, copy.deepcopy(model), torch.randint(0, 64, (2, 8))


def test_trace_until_with_hf_tracer_keeps_blocks_as_leaves():
    model, ref, ids = _gpt2()
    sch = slapo.create_schedule(model)
    assert sch.trace_until("h", tracer="huggingface", config={"input_names": ["input_ids"]})
    assert isinstance(sch.mod, fx.GraphModule)
    called = {n.target for n in sch.mod.graph.nodes if n.op == "call_module"}
    assert {"h.0", "h.1"} <= called and "h.0.attn.c_attn" not in called
    assert [n.target for n in sch.mod.graph.nodes if n.op == "placeholder"] == ["input_ids"]
    expected = ref(input_ids=ids).last_hidden_state
    torch.testing.assert_close(sch.mod(ids)["last_hidden_state"], expected)


def test_recursive_hf_trace_keeps_the_hierarchy_and_the_call_signatures():
    model, ref, ids = _gpt2()
    sch = slapo.create_schedule(model)
    assert sch.trace(tracer="huggingface")
    for path in ("", "h.0", "h.0.attn", "h.1.mlp"):
        assert isinstance(sch[path].mod, fx.GraphModule), path
    # the parent calls each block with layer_past=..., attention_mask=...: still accepted
    block_args = [n.target for n in sch["h.0"].mod.graph.nodes if n.op == "placeholder"]
    assert block_args[:3] == ["hidden_states", "layer_past", "attention_mask"]
    expected = ref(input_ids=ids).last_hidden_state
    torch.testing.assert_close(sch.mod(input_ids=ids)["last_hidden_state"], expected)
    assert sch.find(r"h\.0\.attn\.c_attn|c_attn")  # the traced graphs are searchable


def test_unknown_tracer_is_a_schedule_error():
    model, _, _ = _gpt2()
    with pytest.raises(slapo.ScheduleError, match="unknown tracer 'dynamo'"):
        slapo.create_schedule(model).trace(tracer="dynamo")
