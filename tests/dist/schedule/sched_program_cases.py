"""A whole Slapo-style program on a tiny decoder (run by test_schedule_dist.py).

Tensor parallelism for attention and MLP, decompose + trace + find + fuse of the bias-GeLU,
activation checkpointing of every block, all inside `Verify`; then forward and gradients are
compared with the unscheduled model. This checks that the primitives compose.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from sched_tp_cases import MLP, Attention, _inputs, _run, _slice, close
from torch import nn

import shoal.schedule as slapo


class Block(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, hidden: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(hidden) for _ in range(depth))
        self.head = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def schedule_decoder(sch: slapo.Schedule, depth: int) -> None:
    """The program, written as a Slapo user would."""
    for i in range(depth):
        attn, mlp = sch[f"layers.{i}.attn"], sch[f"layers.{i}.mlp"]
        for name in ("q", "k", "v"):
            attn[name].shard(["weight", "bias"], axis=0)
        attn.sync("bwd_post", "all_reduce")
        attn["out"].shard("weight", axis=1)
        attn["out"].sync("fwd_post", "all_reduce")
        mlp["fc1"].decompose()
        mlp["fc1"].shard(["weight", "bias"], axis=0)
        mlp.sync("bwd_post", "all_reduce")
        mlp["fc2"].shard("weight", axis=1)
        mlp["fc2"].sync("fwd_post", "all_reduce")
        mlp.trace(flatten=True)
        (bias_gelu,) = mlp.find(lambda x, bias: F.gelu(x + bias))
        mlp.fuse(bias_gelu, compiler="aot_eager", name="BiasGeLU")
        sch[f"layers.{i}"].checkpoint()


def decoder_program(rank: int) -> None:
    torch.manual_seed(0)
    ref = Decoder()
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    x, g = _inputs(2, 4, 8)
    with slapo.Verify(sch, [x]):
        schedule_decoder(sch, depth=2)
    assert isinstance(sch["layers.1"].mod, slapo.CheckPointWrapper)
    assert "BiasGeLU_0" in sch["layers.0.mod.mlp"].child  # the wrapped block is `.mod`
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    close(model.head.weight.grad, ref.head.weight.grad)
    close(
        model.layers[0].mod.mlp.fc1.weight.grad, _slice(ref.layers[0].mlp.fc1.weight.grad, 0, rank)
    )
    close(
        model.layers[1].mod.attn.out.weight.grad,
        _slice(ref.layers[1].attn.out.weight.grad, 1, rank),
    )
    close(model.layers[0].mod.ln1.weight.grad, ref.layers[0].ln1.weight.grad)


CASES = {"decoder_program": decoder_program}
