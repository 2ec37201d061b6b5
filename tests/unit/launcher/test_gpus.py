"""Which GPU each local worker gets (`launcher.gpus`): the rule, without a GPU."""

import os

import pytest

from shoal.launcher.gpus import GpuSlots, most_at_once, visible_gpus


def test_no_cuda_changes_nothing():
    slots = GpuSlots([], most_at_once(3, None))
    assert slots.note() is None and slots.env("w0", lambda w: True) == {}
    assert not slots.waiting(lambda w: True)


def test_more_workers_than_gpus_train_on_the_cpu():
    """One group has one backend: 3 workers on 1 GPU all go to the CPU, and the console says so
    (they all asked for cuda:LOCAL_RANK: 'invalid device ordinal' on an H100 machine)."""
    slots = GpuSlots(["0"], most_at_once(3, None))
    assert slots.ids == [] and slots.env("w1", lambda w: True) == {"CUDA_VISIBLE_DEVICES": ""}
    assert slots.note() == (
        "the workers train on the CPU: the run may hold 3 at once and CUDA shows 1 GPU "
        "(one each is needed)"
    )


def test_each_worker_holds_its_own_gpu_and_a_freed_one_is_reused():
    alive = {"w0": True, "w1": True}
    slots = GpuSlots(["2", "5"], most_at_once(2, None))  # CUDA_VISIBLE_DEVICES=2,5
    assert slots.env("w0", alive.get) == {"CUDA_VISIBLE_DEVICES": "2"}
    assert slots.env("w1", alive.get) == {"CUDA_VISIBLE_DEVICES": "5"}
    assert slots.waiting(alive.get)  # an add waits
    with pytest.raises(RuntimeError, match="no free GPU for w2"):
        slots.env("w2", alive.get)
    alive["w0"] = False  # its process ended: its GPU is free again
    assert not slots.waiting(alive.get)
    assert slots.env("w2", alive.get) == {"CUDA_VISIBLE_DEVICES": "2"}
    assert slots.note() == "each worker on a GPU of its own (2 shown)"


def test_a_provider_run_counts_the_replacements_that_boot_during_a_notice():
    assert most_at_once(2, None) == 2
    assert most_at_once(2, 3) == 6  # three servers, each with a replacement booting
    assert GpuSlots(["0", "1", "2", "3"], most_at_once(2, 3)).ids == []


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 1,")
    assert visible_gpus() == ["3", "1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert visible_gpus() == []


def test_the_demo_hides_too_few_gpus_from_both_runs(monkeypatch):
    """On one H100 the mixed run (3 workers) trained on the CPU and the single one on the GPU:
    'digests identical: NO'. Both now train on the CPU there, and on GPUs where each worker
    of the mixed run has its own."""
    import torch

    from shoal.cli.demo import _same_device_for_both

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # (restored after the test)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _same_device_for_both(1) is None  # one worker each: both on the GPU
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    said = _same_device_for_both(3)
    assert said and "3 workers need a GPU each and CUDA shows 1" in said
    assert visible_gpus() == []  # hidden from the launcher and its workers
