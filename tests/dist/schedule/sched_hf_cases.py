"""Hugging Face models built tiny from configs, scheduled with tensor parallelism (blocks and the
vocabulary-parallel token embedding) + activation checkpointing on 2 gloo ranks, compared with
the unscheduled model (forward and every gradient).

Run by tests/dist/test_model_schedules.py. No weights are downloaded: each model is built from a
config (2 layers, hidden 32, dropout off so both runs draw no random numbers).
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import transformers as tf

from shoal.schedule.model_schedule import apply_schedule
from shoal.schedule.model_schedule.base import _pack_by_rank
from shoal.schedule.model_schedule.hf import HF_SPECS

VOCAB, HIDDEN, HEADS, SEQ = 64, 32, 4, 8


def _configs() -> dict:
    common = dict(vocab_size=VOCAB, max_position_embeddings=32)
    return {
        "gpt2": (tf.GPT2Model, tf.GPT2Config(
            vocab_size=VOCAB, n_positions=32, n_layer=2, n_embd=HIDDEN, n_head=HEADS,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "gpt_neo": (tf.GPTNeoModel, tf.GPTNeoConfig(
            **common, num_layers=2, hidden_size=HIDDEN, num_heads=HEADS,
            attention_types=[[["global", "local"], 1]], window_size=4, resid_dropout=0.0,
            embed_dropout=0.0, attention_dropout=0.0)),
        "bert": (tf.BertModel, tf.BertConfig(
            **common, num_hidden_layers=2, hidden_size=HIDDEN, num_attention_heads=HEADS,
            intermediate_size=4 * HIDDEN, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)),
        "opt": (tf.OPTModel, tf.OPTConfig(
            **common, num_hidden_layers=2, hidden_size=HIDDEN, num_attention_heads=HEADS,
            ffn_dim=4 * HIDDEN, word_embed_proj_dim=HIDDEN, dropout=0.0, attention_dropout=0.0)),
        "llama": (tf.LlamaModel, tf.LlamaConfig(
            **common, num_hidden_layers=2, hidden_size=HIDDEN, num_attention_heads=HEADS,
            num_key_value_heads=HEADS, intermediate_size=2 * HIDDEN)),
    }  # fmt: skip


def _expected_grad(full: torch.Tensor, param: torch.Tensor, rank: int) -> torch.Tensor:
    axis = getattr(param, "shard_axis", None)
    if axis is None:
        return full
    world = dist.get_world_size()
    parts = getattr(param, "packed_parts", None)
    if parts is not None:  # GPT-2's c_attn: regrouped per rank before the split
        full = _pack_by_rank(full, axis, parts, world)
    return full.chunk(world, dim=axis)[rank]


def _check(name: str, rank: int) -> None:
    cls, config = _configs()[name]
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).train()
    ref = copy.deepcopy(model)
    sch = apply_schedule(model, name, ckpt_ratio=1.0, group=None, vocab_parallel=True)
    assert sch.mod is model
    wrapped = [p for p, s in sch.named_schedules() if type(s.mod).__name__ == "CheckPointWrapper"]
    assert len(wrapped) == 2, wrapped
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    weight = torch.randn(2, SEQ, HIDDEN, generator=torch.Generator().manual_seed(2))
    out = sch.mod(input_ids=ids).last_hidden_state
    ref_out = ref(input_ids=ids).last_hidden_state
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    (out * weight).sum().backward()
    (ref_out * weight).sum().backward()
    ref_params = dict(ref.named_parameters())
    sharded = 0
    for pname, param in sch.mod.named_parameters():
        full = ref_params[pname.replace(".mod.", ".")].grad
        sharded += getattr(param, "shard_axis", None) is not None
        torch.testing.assert_close(
            param.grad, _expected_grad(full, param, rank), rtol=1e-4, atol=1e-5,
            msg=lambda m, n=pname: f"{name}: grad of {n}: {m}",
        )  # fmt: skip
    assert sharded >= 9, f"{name}: only {sharded} sharded parameters"
    assert getattr(sch.get_module(HF_SPECS[name].embedding).weight, "shard_axis", None) == 0


CASES = {f"hf_{name}": (lambda rank, n=name: _check(n, rank)) for name in _configs()}
