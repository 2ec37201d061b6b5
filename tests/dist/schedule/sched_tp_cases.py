"""Tensor-parallel cases (run inside 2 gloo processes by test_schedule_dist.py).

Every case builds a tiny model, keeps an unscheduled copy, schedules the other, runs forward and
backward on both with the same input and compares outputs and gradients (sharded gradients
against the matching slice of the full gradient).
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import shoal.schedule as slapo
from shoal.schedule.sharding import vocab_parallel_embedding_hooks

close = torch.testing.assert_close


def _slice(t: torch.Tensor, axis: int, rank: int) -> torch.Tensor:
    return t.chunk(dist.get_world_size(), dim=axis)[rank]


def _run(model: nn.Module, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(x.is_floating_point())
    out = model(x)
    (out * g).sum().backward()
    return out, x.grad


def _compare_params(sched: nn.Module, ref: nn.Module, rank: int) -> None:
    ref_params = dict(ref.named_parameters())
    for name, p in sched.named_parameters():
        key = name.replace(".mod.", ".")
        full = ref_params[key].grad
        axis = getattr(p, "shard_axis", None)
        expected = _slice(full, axis, rank) if axis is not None else full
        close(p.grad, expected, msg=lambda m, n=name: f"grad of {n}: {m}")


class MLP(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, hidden: int = 8, head_dim: int = 2) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]  # (no tuple unpacking: fx-traceable)
        # -1 heads: the block works with the full or the local (sharded) head count
        q, k, v = (
            f(x).view(b, s, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v)
        )
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(att.transpose(1, 2).reshape(b, s, -1))


def _inputs(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(*shape), torch.randn(*shape[:-1], 8)


def column_linear(rank: int) -> None:
    torch.manual_seed(0)
    ref = nn.Linear(8, 8)
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    sch.shard(["weight", "bias"], axis=0)
    sch.sync("bwd_post", "all_reduce")
    sch.sync("fwd_post", "all_gather", axis=2, tensor_parallel_output_grad=False)
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    _compare_params(sch.mod, ref, rank)


def row_linear(rank: int) -> None:
    torch.manual_seed(0)
    ref = nn.Linear(8, 8)
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    sch.shard("weight", axis=1)
    sch.sync("fwd_pre", "scatter", axis=2)
    sch.sync("fwd_post", "all_reduce")
    assert type(sch.mod).__name__ == "LinearWithSyncFunc", type(sch.mod)
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)  # bias added once, after the sum
    close(gx, gx_ref)
    _compare_params(sch.mod, ref, rank)


def _tp_mlp(sch: slapo.Schedule) -> None:
    sch["fc1"].shard(["weight", "bias"], axis=0)
    sch["fc1"].sync("bwd_post", "all_reduce")
    sch["fc2"].shard("weight", axis=1)
    sch["fc2"].sync("fwd_post", "all_reduce")


def tp_mlp(rank: int) -> None:
    torch.manual_seed(0)
    ref = MLP()
    sch = slapo.create_schedule(copy.deepcopy(ref))
    _tp_mlp(sch)
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    _compare_params(sch.mod, ref, rank)


def tp_attention(rank: int) -> None:
    torch.manual_seed(0)
    ref = Attention()
    sch = slapo.create_schedule(copy.deepcopy(ref))
    for name in ("q", "k", "v"):
        sch[name].shard(["weight", "bias"], axis=0)
    sch.sync("bwd_post", "all_reduce")  # one all-reduce for the shared input of q, k, v
    sch["out"].shard("weight", axis=1)
    sch["out"].sync("fwd_post", "all_reduce")
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    _compare_params(sch.mod, ref, rank)


def vocab_embedding(rank: int) -> None:
    torch.manual_seed(0)
    ref = nn.Embedding(16, 8)
    sch = slapo.create_schedule(copy.deepcopy(ref))
    sch.shard("weight", axis=0)
    pre, post = vocab_parallel_embedding_hooks(sch)
    sch.sync("fwd_pre", pre)
    sch.sync("fwd_post", post)
    ids = torch.tensor([[0, 3, 8, 15], [9, 7, 1, 12]])
    g = torch.randn(2, 4, 8)
    out, _ = _run(sch.mod, ids, g)
    out_ref, _ = _run(ref, ids, g)
    close(out, out_ref)
    _compare_params(sch.mod, ref, rank)


def sequence_parallel(rank: int) -> None:
    torch.manual_seed(0)
    ref = MLP()
    sch = slapo.create_schedule(copy.deepcopy(ref))
    sch["fc1"].shard(["weight", "bias"], axis=0)
    sch["fc1"].sync("fwd_pre", "all_gather", axis=1)
    sch["fc2"].shard("weight", axis=1)
    sch["fc2"].sync("fwd_post", "reduce_scatter", axis=1)
    x, g = _inputs(2, 4, 8)
    # each rank owns a slice of the sequence
    out, gx = _run(sch.mod, _slice(x, 1, rank), _slice(g, 1, rank))
    out_ref, gx_ref = _run(ref, x, g)
    close(out, _slice(out_ref, 1, rank))
    close(gx, _slice(gx_ref, 1, rank))
    bias = sch.mod.fc2.bias  # replicated under SP: its gradient is summed across ranks
    dist.all_reduce(bias.grad)
    _compare_params(sch.mod, ref, rank)


def verify_passes(rank: int) -> None:
    torch.manual_seed(rank)  # different init per rank: Verify broadcasts rank 0's weights
    sch = slapo.create_schedule(MLP())
    x = torch.randn(2, 4, 8)
    dist.broadcast(x, 0)
    with slapo.Verify(sch, [x]):
        _tp_mlp(sch)


def verify_catches_missing_sync(rank: int) -> None:
    sch = slapo.create_schedule(MLP())
    x = torch.randn(2, 4, 8)
    dist.broadcast(x, 0)
    try:
        with slapo.Verify(sch, [x]):
            sch["fc1"].shard(["weight", "bias"], axis=0)
            sch["fc2"].shard("weight", axis=1)  # forgot fc2.sync("fwd_post", "all_reduce")
    except slapo.VerificationError as err:
        assert isinstance(err, AssertionError) and "Verify" in str(err)
        return
    raise AssertionError("Verify accepted a wrong schedule")


def bad_schedules_raise(rank: int) -> None:
    sch = slapo.create_schedule(nn.Sequential(nn.Linear(8, 5), nn.Linear(5, 8)))
    try:
        sch["0"].shard("weight", axis=0)
    except slapo.ScheduleError as err:
        assert "shard" in str(err) and "'0'" in str(err) and "divisible" in str(err), str(err)
    else:
        raise AssertionError("indivisible shard accepted")
    try:
        sch["1"].sync("fwd_post", "all_reduce")
    except slapo.ScheduleError as err:
        assert "sync" in str(err) and "'1'" in str(err) and "sharded" in str(err), str(err)
    else:
        raise AssertionError("all_reduce of a replicated output accepted")
    mlp = slapo.create_schedule(MLP())
    mlp["fc1"].shard(["weight", "bias"], axis=0)
    try:
        mlp["fc1"].sync("fwd_post", "all_reduce")
    except slapo.ScheduleError as err:
        assert "partition" in str(err), str(err)
    else:
        raise AssertionError("all_reduce of a column-parallel output accepted")


def parallel_cross_entropy(rank: int) -> None:
    from shoal.schedule.op import ParallelCrossEntropy

    torch.manual_seed(0)
    logits = torch.randn(2, 4, 16)
    target = torch.randint(0, 16, (2, 4))
    target[0, 0] = -100  # ignored token
    full = logits.clone().requires_grad_()
    ref = F.cross_entropy(full.view(-1, 16), target.view(-1), reduction="none").view(2, 4)
    ref.sum().backward()
    local = _slice(logits, 2, rank).clone().requires_grad_()
    loss = ParallelCrossEntropy()(local, target)
    loss.sum().backward()
    close(loss, ref.detach())
    close(local.grad, _slice(full.grad, 2, rank))


def meta_init_build(rank: int) -> None:
    """Delayed init: shard on meta, build -> shards of ONE full model (rank 0's init)."""
    torch.manual_seed(rank)  # ranks would disagree if each initialized its own copy
    with slapo.init_empty_weights():
        model = MLP()
    sch = slapo.create_schedule(model)
    _tp_mlp(sch)
    model, _ = slapo.build(sch, init_weights=True)
    assert not any(p.is_meta for p in model.parameters())
    full = MLP()
    with torch.no_grad():  # reassemble the full model from the shards of every rank
        for (name, p), q in zip(model.named_parameters(), full.parameters(), strict=True):
            axis = getattr(p, "shard_axis", None)
            parts = [torch.empty_like(p) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, p.detach().contiguous())
            if axis is None:
                close(parts[0], parts[1], msg=f"replicated {name} differs across ranks")
            q.copy_(torch.cat(parts, dim=axis) if axis is not None else p)
    x, g = _inputs(2, 4, 8)
    out, _ = _run(model, x, g)
    close(out, full(x))


def reshard_strings(rank: int) -> None:
    """RR->RS->SR->RR round trip through hooks: identity forward, identity gradient."""
    seq = nn.Sequential(nn.Identity(), nn.Identity(), nn.Identity())
    sch = slapo.create_schedule(seq)
    sch["0"].sync("fwd_post", "RR->RS")  # keep my slice of the hidden dim
    sch["1"].sync("fwd_post", "RS->SR")  # all-to-all: slice of the sequence instead
    sch["2"].sync("fwd_pre", "SR->RR")  # all-gather the sequence
    seen = []
    sch["1"].sync("fwd_post", lambda m, i, o: seen.append(tuple(o.shape)))
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    assert seen == [(2, 2, 8)], seen
    close(out, x)
    close(gx, g)  # the loss is replicated, so x's gradient is all of g on every rank


def tp_attention_fused_qkv(rank: int) -> None:
    """Trace, fuse q/k/v horizontally into the head-major FusedQKV op, then shard by heads."""
    from shoal.schedule.op import FusedQKV

    torch.manual_seed(0)
    ref = Attention()
    model = copy.deepcopy(ref)
    sch = slapo.create_schedule(model)
    sch.trace()
    sch.replace(FusedQKV.from_linears(model.q, model.k, model.v, num_heads=4), sch.find(r"[qkv]$"))
    sch["FusedQKV_0.fused_linear"].shard(["weight", "bias"], axis=0)
    sch["FusedQKV_0"].sync("bwd_post", "all_reduce")
    sch["out"].shard("weight", axis=1)
    sch["out"].sync("fwd_post", "all_reduce")
    x, g = _inputs(2, 4, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    grads = []  # the reference q/k/v gradients, arranged in the fused head-major layout
    for m in (ref.q, ref.k, ref.v):
        lin = nn.Linear(8, 8)
        lin.weight.data, lin.bias.data = m.weight.grad, m.bias.grad
        grads.append(lin)
    fused_ref = FusedQKV.from_linears(*grads, num_heads=4).fused_linear
    fused = sch.mod.FusedQKV_0.fused_linear
    close(fused.weight.grad, _slice(fused_ref.weight.detach(), 0, rank))
    close(fused.bias.grad, _slice(fused_ref.bias.detach(), 0, rank))
    close(sch.mod.out.weight.grad, _slice(ref.out.weight.grad, 1, rank))


def collective_fallbacks(rank: int) -> None:
    """The list all_gather / all_reduce+slice fallbacks agree with the tensor collectives."""
    from shoal.schedule.sharding import collectives as C

    x = torch.arange(24.0).view(2, 3, 4) * (rank + 1)
    fast = [C.all_gather_along(x, 1, None), C.reduce_scatter_along(x, 2, None)]
    backend = str(dist.get_backend())
    keys = {(backend, "all_gather_into_tensor"), (backend, "reduce_scatter_tensor")}
    C._UNSUPPORTED.update(keys)
    try:
        slow = [C.all_gather_along(x, 1, None), C.reduce_scatter_along(x, 2, None)]
    finally:
        C._UNSUPPORTED.difference_update(keys)
    assert fast[0].shape == (2, 6, 4) and fast[1].shape == (2, 3, 2)
    close(fast[0][:, 3 * rank : 3 * rank + 3], x)
    close(fast[1], _slice(x / (rank + 1) * 3, 2, rank))  # sum of (1x + 2x)
    for a, b in zip(fast, slow, strict=True):
        close(a, b)


CASES = {
    "column_linear": column_linear,
    "row_linear": row_linear,
    "tp_mlp": tp_mlp,
    "tp_attention": tp_attention,
    "tp_attention_fused_qkv": tp_attention_fused_qkv,
    "vocab_embedding": vocab_embedding,
    "sequence_parallel": sequence_parallel,
    "verify_passes": verify_passes,
    "verify_catches_missing_sync": verify_catches_missing_sync,
    "bad_schedules_raise": bad_schedules_raise,
    "parallel_cross_entropy": parallel_cross_entropy,
    "meta_init_build": meta_init_build,
    "reshard_strings": reshard_strings,
    "collective_fallbacks": collective_fallbacks,
}
