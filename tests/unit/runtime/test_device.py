"""A worker's device (`runtime.loop._device`) on a machine CUDA would show GPUs on (faked)."""

import pytest
import torch

from shoal.errors import UserError
from shoal.runtime.loop import _device


@pytest.fixture
def one_gpu(monkeypatch):
    """CUDA shows one GPU; what the worker asks of torch is recorded, not done."""
    asked = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: asked.setdefault("device", d))
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on: asked.update(det=on))
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "x")  # restored after the test
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.delenv("SHOAL_WORKER_ID", raising=False)
    return asked


def test_exact_mode_asks_for_deterministic_kernels(one_gpu, monkeypatch):
    """Two identical one-GPU runs of examples/digits.py ended in different bits on an H100."""
    import os

    monkeypatch.setenv("LOCAL_RANK", "0")
    assert _device("exact") == torch.device("cuda", 0)
    assert one_gpu == {"det": True, "device": torch.device("cuda", 0)}
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_fast_mode_keeps_torchs_defaults(one_gpu, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    _device("fast")
    assert "det" not in one_gpu and torch.backends.cudnn.benchmark


def test_a_local_rank_without_a_gpu_is_one_line(one_gpu, monkeypatch):
    """torchrun --nproc-per-node 2 on one GPU: was 'CUDA error: invalid device ordinal'."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(UserError, match="^local rank 1 has no GPU of its own: CUDA shows 1 "):
        _device("exact")
    monkeypatch.setenv("SHOAL_WORKER_ID", "w1")  # under shoal run: pinned, cuda:0 inside
    assert _device("exact") == torch.device("cuda", 0)
