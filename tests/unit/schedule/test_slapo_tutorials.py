"""Programs in the shape of Slapo's documentation tutorials, run unchanged (apart from the import
line) with ``import shoal.schedule as slapo`` on CPU, in one process.

Written in our own words after the tutorials' structure (docs/schedule.md lists them): the quick
start (schedule a small model step by step: shard + sync, trace, find + fuse, checkpoint, build),
and the GPT and BERT schedules on Hugging Face models built from configs (tensor-parallel
annotations, bias-GeLU fusion, checkpointing, `trace_until(tracer="huggingface")` and a pipeline
cut). Each result is compared with the unscheduled model.
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import shoal.schedule as slapo


# ---- quick start --------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    def __init__(self, hidden=16, heads=2):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.linear1 = nn.Linear(hidden, 4 * hidden)
        self.activation = nn.GELU()
        self.linear2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln(x))
        return x + self.linear2(self.activation(self.linear1(x)))


class TinyModel(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def quick_start(model):
    sch = slapo.create_schedule(model)
    print(sch)
    for i in range(2):
        subsch = sch[f"layers.{i}"]
        # expose linear1's bias add (before sharding), to fuse it with the GeLU below
        subsch["linear1"].decompose()
        # tensor parallelism of the MLP (a no-op split on one device)
        subsch["linear1"].shard(["weight", "bias"], axis=0)
        subsch["linear1"].sync(mode="bwd_post", sync_op_or_fn="all_reduce")
        subsch["linear2"].shard("weight", axis=1)
        subsch["linear2"].sync(mode="fwd_post", sync_op_or_fn="all_reduce")
        subsch.trace(flatten=True)

        def pattern(x, bias):
            return F.gelu(bias + x)

        subgraph = subsch.find(pattern)
        subsch.fuse(subgraph, compiler="TorchScript", name="BiasGeLU")
        subsch.checkpoint()
    opt_model, _ = slapo.build(sch, init_weights=False)
    return opt_model


def test_quick_start_runs_unchanged():
    torch.manual_seed(0)
    model = TinyModel()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 5, 16)
    opt_model = quick_start(model)
    assert isinstance(opt_model.layers[0], slapo.CheckPointWrapper)
    assert isinstance(opt_model.layers[0].mod.BiasGeLU_0, torch.jit.ScriptModule)
    out = opt_model(x)
    torch.testing.assert_close(out, ref(x), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(
        opt_model.layers[1].mod.linear2.weight.grad, ref.layers[1].linear2.weight.grad
    )


# ---- GPT and BERT schedules on Hugging Face models -----------------------------------------
def schedule_gpt(sch, config, ckpt_ratio=1.0):
    for i in range(config.n_layer):
        prefix = f"transformer.h.{i}"
        sch[f"{prefix}.mlp.c_fc"].shard("weight", axis=1)  # a Conv1D weight is (in, out)
        sch[f"{prefix}.mlp.c_fc"].shard("bias", axis=0)
        sch[f"{prefix}.mlp.c_fc"].sync(mode="bwd_post", sync_op_or_fn="all_reduce")
        sch[f"{prefix}.mlp.c_proj"].shard("weight", axis=0)
        sch[f"{prefix}.mlp.c_proj"].sync(mode="fwd_post", sync_op_or_fn="all_reduce")
    for i in range(int(config.n_layer * ckpt_ratio)):
        sch[f"transformer.h.{i}"].checkpoint()
    sch.trace_until("transformer.h", tracer="huggingface", config={"input_names": ["input_ids"]})
    sch["transformer.h.0"].cut_pipeline_stage()


def schedule_bert(sch, config):
    for i in range(config.num_hidden_layers):
        layer = sch[f"encoder.layer.{i}"]
        layer["intermediate.dense"].decompose()
        for name in ("query", "key", "value"):
            layer[f"attention.self.{name}"].shard(["weight", "bias"], axis=0)
            layer[f"attention.self.{name}"].sync(mode="bwd_post", sync_op_or_fn="all_reduce")
        layer["attention.output.dense"].shard("weight", axis=1)
        layer["attention.output.dense"].sync(mode="fwd_post", sync_op_or_fn="all_reduce")
        layer["intermediate"].trace(flatten=True)
        subgraph = layer["intermediate"].find(lambda x, bias: F.gelu(x + bias))
        layer["intermediate"].fuse(subgraph, compiler="TorchScript", name="BiasGeLU")
        layer.checkpoint()


def test_gpt_tutorial_runs_unchanged():
    transformers = pytest.importorskip("transformers")
    from shoal.schedule.pipeline import generate_pipeline_partition

    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 8))
    sch = slapo.create_schedule(model)
    schedule_gpt(sch, config)
    split = generate_pipeline_partition(sch)
    assert [n for n, _ in split.named_children()] == ["submod_0", "submod_1"]
    out = split(ids)["logits"]  # the two stages, run one after the other
    torch.testing.assert_close(out, ref(ids).logits, rtol=1e-5, atol=1e-5)


def test_bert_tutorial_runs_unchanged():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
        vocab_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 8))
    sch = slapo.create_schedule(model)
    schedule_bert(sch, config)
    opt_model, _ = slapo.build(sch, init_weights=False)
    fused = opt_model.encoder.layer[0].mod.intermediate.BiasGeLU_0
    assert isinstance(fused, torch.jit.ScriptModule)
    out = opt_model(input_ids=ids).last_hidden_state
    expected = ref(input_ids=ids).last_hidden_state
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(
        opt_model.encoder.layer[1].mod.attention.self.query.weight.grad,
        ref.encoder.layer[1].attention.self.query.weight.grad,
        rtol=1e-4,
        atol=1e-5,
    )
