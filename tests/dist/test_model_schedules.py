"""The library schedules on 2 gloo processes: forward and gradients equal the unscheduled model's.

Each rank builds the same model (same seed), keeps an unscheduled copy as the reference, applies
the library schedule (tensor parallelism over both ranks, checkpointing, optionally QKV fusion)
and checks: the output, the gradient of every replicated parameter, and the gradient of every
sharded parameter against the matching slice of the reference gradient. WideResNet also checks
the sharded BatchNorm running statistics.

The ranks are this file run as a script (`python test_model_schedules.py RANK PORT OUT`), so
they do not depend on how pytest imports test modules; one pair of processes runs every case,
since process start-up dominates the cost.
"""

import copy
import json
import os
import socket
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

WORLD = 2
# model -> [(fusion, ckpt_ratio, vocab_parallel)]: every model sharded and partly checkpointed;
# the transformers also fused and fully checkpointed; the decoders once vocabulary-parallel.
CASES = {
    "gpt2": [(False, 0.5, True), (True, 1.0, False)],
    "bert": [(False, 0.5, False), (True, 1.0, False)],
    "llama": [(False, 0.5, False), (True, 1.0, True)],
    "wideresnet": [(False, 0.5, False)],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reference_name(name: str) -> str:
    # The checkpoint wrapper inserts ".mod" into the path of whatever it wraps.
    return name.replace(".mod.", ".")


def _head_major(tensors: list[torch.Tensor], head_dim: int) -> torch.Tensor:
    """The q/k/v tensors in FusedQKV's row order (q, k, v of head 0, then head 1, ...)."""
    stacked = torch.stack(tensors)  # (3, H*hd, ...)
    heads = stacked.size(1) // head_dim
    stacked = stacked.view(3, heads, head_dim, *stacked.shape[2:])
    return stacked.transpose(0, 1).reshape(3 * heads * head_dim, *stacked.shape[3:])


def _expected(name: str, ref: dict, head_dim: int, attr: str) -> torch.Tensor:
    """The reference value (`attr` = "grad" or "data") for scheduled parameter `name`."""
    if ".FusedQKV_0.qkv." in name:
        owner, _, kind = name.partition(".FusedQKV_0.qkv.")
        parts = [getattr(ref[f"{owner}.{p}_proj.{kind}"], attr) for p in "qkv"]
        return _head_major(parts, head_dim)
    return getattr(ref[name], attr)


def _local_slice(full: torch.Tensor, local: torch.Tensor, rank: int) -> torch.Tensor:
    if full.shape == local.shape:
        return full
    (axis,) = [d for d in range(full.dim()) if full.shape[d] != local.shape[d]]
    return full.chunk(WORLD, dim=axis)[rank]


def _check(rank: int, name: str, fusion: bool, ratio: float, vocab: bool) -> None:
    from shoal.models import get_model_entry
    from shoal.schedule.model_schedule import apply_schedule

    entry = get_model_entry(name)
    cfg = entry.make_config()
    torch.manual_seed(0)
    ref = entry.build(cfg)
    extra = {"vocab_parallel": True} if vocab else {}
    sch = apply_schedule(
        copy.deepcopy(ref), name, ckpt_ratio=ratio, fusion=fusion, group=dist.group.WORLD, **extra
    )
    model = sch.mod
    inputs = entry.make_inputs(cfg, 2, 8, torch.Generator().manual_seed(1))
    out_ref, out = ref(*inputs), model(*inputs)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    entry.loss(out_ref, inputs).backward()
    entry.loss(out, inputs).backward()

    ref_params = dict(ref.named_parameters())
    head_dim = next(m.head_dim for m in ref.modules() if hasattr(m, "head_dim")) if fusion else 0
    n_sharded = 0
    for pname, p in model.named_parameters():
        full = _expected(_reference_name(pname), ref_params, head_dim, "grad")
        expect = _local_slice(full, p.grad, rank)
        n_sharded += expect is not full
        torch.testing.assert_close(p.grad, expect, rtol=1e-4, atol=1e-5, msg=f"grad of {pname}")
    assert n_sharded > 0, "the schedule sharded nothing"
    if vocab:  # the embedding and the LM head hold half the vocabulary each
        vocab_rows = {p.shape[0] for n, p in model.named_parameters() if "lm_head" in n}
        assert vocab_rows == {cfg.vocab_size // WORLD}
    if name == "wideresnet":  # sharded BatchNorm statistics are the reference's slices
        ref_bufs = dict(ref.named_buffers())
        for bname, b in model.named_buffers():
            # A checkpointed block runs its forward twice in training (the recomputation), so
            # its BatchNorm running statistics take two momentum updates: compare the others.
            if "running" in bname and ".mod." not in bname:
                full = ref_bufs[bname]
                torch.testing.assert_close(b, _local_slice(full, b, rank), msg=bname)


def _case_id(name: str, fusion: bool, ratio: float, vocab: bool) -> str:
    return f"{name}-fusion{int(fusion)}-ckpt{ratio}" + ("-vocab" if vocab else "")


def _case_ids() -> list[str]:
    return [_case_id(name, *case) for name, cases in CASES.items() for case in cases]


def _rank_main(rank: int, port: int, out: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120),
    )
    results = {}
    for name, cases in CASES.items():
        for case in cases:
            try:
                _check(rank, name, *case)
                results[_case_id(name, *case)] = "ok"
            except Exception:
                results[_case_id(name, *case)] = traceback.format_exc()
            dist.barrier()
    out.write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("model_schedules")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(port), str(out_dir / f"rank{rank}.json")],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for rank in range(WORLD)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    for rank, p in enumerate(procs):
        assert p.returncode == 0, f"rank {rank} failed:\n{errors[rank][-3000:]}"
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.dist
@pytest.mark.parametrize("case", _case_ids())
def test_scheduled_model_matches_unscheduled(results, case):
    for rank, per_rank in enumerate(results):
        assert per_rank[case] == "ok", f"rank {rank}: {per_rank[case]}"


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
