"""2-stage pipeline cases (run inside 2 gloo processes by test_schedule_dist.py).

The model is traced up to its block list, cut after block 1, built with
`build(target="pipeline")` and run with GPipe and 1F1B; the last stage's output and loss and
each stage's parameter gradients must equal those of the unscheduled model on the same
micro-batches (a weight tied across the two stages included).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

import shoal.schedule as slapo

close = torch.testing.assert_close
NUM_MICROBATCHES = 4


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self, hidden: int = 8, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(4, hidden)
        self.layers = nn.ModuleList(Block(hidden) for _ in range(depth))
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class TwoStreams(nn.Module):
    """Two tensors cross the stage boundary (the block output and a skip connection)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(4, hidden)
        self.layers = nn.ModuleList(Block(hidden) for _ in range(2))
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.embed(x)
        h = self.layers[0](skip)
        h = self.layers[1](h)
        return self.head(h + skip)


class TiedNet(nn.Module):
    """The input projection and the output head share one weight (a tied embedding/LM head)."""

    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(hidden, hidden)
        self.layers = nn.ModuleList(Block(hidden) for _ in range(2))
        self.head = nn.Linear(hidden, hidden)
        self.head.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target)


def _pipeline(rank: int, schedule: str, net: type[nn.Module] = Net, cut: str = "layers.1") -> None:
    torch.manual_seed(0)
    model = net()
    ref = copy.deepcopy(model)
    x, y = torch.randn(8, 4), torch.randn(8, 4 if net is TiedNet else 2)

    sch = slapo.create_schedule(model)
    sch.trace_until("layers")
    sch[cut].cut_pipeline_stage()
    pipe, _ = slapo.build(
        sch, target="pipeline", num_microbatches=NUM_MICROBATCHES, schedule=schedule, loss_fn=_loss
    )
    split = slapo.pipeline.generate_pipeline_partition(sch)
    assert [n for n, _ in split.named_children()] == ["submod_0", "submod_1"]
    assert pipe.stage_index == rank
    losses: list[torch.Tensor] = []
    out = pipe.step(x, target=y, losses=losses) if rank == 0 else pipe.step(target=y, losses=losses)

    # reference: the same micro-batches; the schedules average gradients over micro-batches
    ref_losses = []
    for xm, ym in zip(x.chunk(NUM_MICROBATCHES), y.chunk(NUM_MICROBATCHES), strict=True):
        loss = _loss(ref(xm), ym)
        (loss / NUM_MICROBATCHES).backward()
        ref_losses.append(loss.detach())
    if pipe.is_last:
        close(out, ref(x).detach())
        close(torch.stack(losses), torch.stack(ref_losses))
    ref_params = dict(ref.named_parameters())
    seen = 0
    for name, p in model.named_parameters():
        if p.grad is not None:  # this stage's parameters
            close(p.grad, ref_params[name].grad, msg=lambda m, n=name: f"{n}: {m}")
            seen += 1
    assert seen > 0, "stage owns no parameters"


def gpipe(rank: int) -> None:
    _pipeline(rank, "gpipe")


def one_f_one_b(rank: int) -> None:
    _pipeline(rank, "1f1b")


def two_values_cross_the_cut(rank: int) -> None:
    _pipeline(rank, "1f1b", TwoStreams, "layers.0")


def tied_weights_across_stages(rank: int) -> None:
    """Each stage's copy of the tied weight gets the sum of both stages' gradients."""
    _pipeline(rank, "gpipe", TiedNet, "layers.0")


CASES = {
    "pipeline_gpipe": gpipe,
    "pipeline_1f1b": one_f_one_b,
    "pipeline_two_values": two_values_cross_the_cut,
    "pipeline_tied_weights": tied_weights_across_stages,
}
