"""DTensor-backend cases (run inside 2 gloo processes by test_schedule_dist.py).

The same Slapo schedules as in `sched_tp_cases`, with ``create_schedule(..., backend="dtensor")``:
`build` lowers them to `ColwiseParallel` / `RowwiseParallel`; outputs and (full) gradients must
match the unscheduled model.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from sched_tp_cases import MLP, _inputs, _run, _slice, _tp_mlp, close
from torch import nn

import shoal.schedule as slapo


def dtensor_backend_mlp(rank: int) -> None:
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    ref = MLP()
    sch = slapo.create_schedule(copy.deepcopy(ref), backend="dtensor")
    _tp_mlp(sch)
    model, _ = slapo.build(sch)
    assert isinstance(model.fc1.weight, DTensor) and model.fc1.weight.to_local().shape == (16, 8)
    x, g = _inputs(2, 4, 8)
    out, gx = _run(model, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        close(p.grad.full_tensor(), ref_params[name].grad)


def dtensor_backend_embedding_and_sp(rank: int) -> None:
    """Vocab-parallel embedding, then a sequence-parallel MLP, all lowered to DTensor styles."""

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.mlp = MLP()

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.mlp(self.embed(ids))

    torch.manual_seed(0)
    ref = Tiny()
    sch = slapo.create_schedule(copy.deepcopy(ref), backend="dtensor")
    sch["embed"].shard("weight", axis=0)
    sch["embed"].sync("fwd_post", "reduce_scatter", axis=1)  # leave it sequence-sharded
    sch["mlp.fc1"].shard(["weight", "bias"], axis=0)
    sch["mlp.fc1"].sync("fwd_pre", "all_gather", axis=1)
    sch["mlp.fc2"].shard("weight", axis=1)
    sch["mlp.fc2"].sync("fwd_post", "reduce_scatter", axis=1)
    model, _ = slapo.build(sch)
    ids = torch.tensor([[0, 3, 8, 15], [9, 7, 1, 12]])
    g = torch.randn(2, 4, 8)
    out, _ = _run(model, ids, _slice(g, 1, rank))
    out_ref, _ = _run(ref, ids, g)
    close(out, _slice(out_ref, 1, rank))
    close(model.embed.weight.grad.full_tensor(), ref.embed.weight.grad)
    close(model.mlp.fc1.weight.grad.full_tensor(), ref.mlp.fc1.weight.grad)


def dtensor_backend_verify(rank: int) -> None:
    """Verify accepts a correct tensor-parallel MLP schedule lowered to DTensor styles."""
    sch = slapo.create_schedule(MLP(), backend="dtensor")
    x = torch.randn(2, 4, 8)
    dist.broadcast(x, 0)
    with slapo.Verify(sch, [x]):
        sch["fc1"].shard(["weight", "bias"], axis=0)
        sch["fc1"].sync("bwd_post", "all_reduce")
        sch["fc2"].shard("weight", axis=1)
        sch["fc2"].sync("fwd_post", "all_reduce")


CASES = {
    "dtensor_backend_mlp": dtensor_backend_mlp,
    "dtensor_backend_verify": dtensor_backend_verify,
    "dtensor_backend_embedding_sp": dtensor_backend_embedding_and_sp,
}
