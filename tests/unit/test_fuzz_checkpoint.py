"""The checkpoint loader, fuzzed: random bytes, truncations, bit flips, forged manifests and a
valid checkpoint of another job either load, are skipped with a warning, or are refused with
one line; never another exception, never a write."""

import hashlib
import json
import pathlib
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.errors import UserError
from shoal.runtime.checkpoint import (
    check_resumable,
    latest_checkpoint_step,
    load_latest,
    save_checkpoint,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FP = "a" * 64
ANY_JSON = st.recursive(
    st.none() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(max_size=3), inner),
)
STATE = {"step": 3, "model": {"w": torch.arange(6.0)}, "opt": {"lr": 0.1, "m": [1, 2]}}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, bytes]:
    """The two files of one valid checkpoint of step 3."""
    root = tmp_path_factory.mktemp("valid")
    save_checkpoint(str(root), 3, STATE, FP)
    return {p.name: p.read_bytes() for p in root.iterdir()}


def write(root: pathlib.Path, files: dict[str, bytes]) -> dict[str, bytes]:
    for p in root.glob("*"):
        p.unlink()
    for name, data in files.items():
        (root / name).write_bytes(data)
    return {p.name: p.read_bytes() for p in root.iterdir()}


def every_reader_behaves(root: pathlib.Path) -> object:
    """Each entry point: a result, a skip (warning) or a one-line UserError. Nothing written."""
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    outcome = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for read in (lambda: load_latest(str(root), FP, required=True),
                     lambda: check_resumable(str(root), FP),
                     lambda: latest_checkpoint_step(str(root), FP)):  # fmt: skip
            try:
                outcome = read()
            except UserError as exc:
                assert "\n" not in str(exc)
    assert all("\n" not in str(w.message) for w in caught)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before
    return outcome


@FUZZ
@given(data=st.data())
def test_damaged_checkpoints(tmp_path, pristine, data):
    pt, manifest = "ckpt-000000003.pt", "ckpt-000000003.json"
    files = dict(pristine)
    damage = data.draw(st.sampled_from(["truncate", "flip", "random", "forge", "manifest"]))
    target = data.draw(st.sampled_from([pt, manifest]))
    blob = files[target]
    if damage == "truncate":
        files[target] = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif damage == "flip":
        i = data.draw(st.integers(0, len(blob) - 1))
        files[target] = (
            blob[:i] + bytes([blob[i] ^ (1 << data.draw(st.integers(0, 7)))]) + blob[i + 1 :]
        )
    elif damage == "random":
        files[target] = data.draw(st.binary(max_size=2048))
    elif damage == "forge":  # random payload under a manifest that vouches for it
        files[pt] = data.draw(st.one_of(st.binary(max_size=2048), st.just(blob[: len(blob) // 2])))
        meta = {"step": 3, "fingerprint": FP, "bytes": len(files[pt]),
                "sha256": hashlib.sha256(files[pt]).hexdigest()}  # fmt: skip
        files[manifest] = json.dumps(meta).encode()
    else:  # a manifest of any JSON shape
        value = data.draw(ANY_JSON)
        files[manifest] = json.dumps(value).encode()
    write(tmp_path, files)
    outcome = every_reader_behaves(tmp_path)
    assert outcome in (None, 3)  # latest_checkpoint_step: the step, or nothing to offer


def test_valid_checkpoint_of_another_job_is_refused_in_one_line(tmp_path, pristine):
    write(tmp_path, pristine)
    with pytest.raises(UserError, match="belongs to a different job"):
        load_latest(str(tmp_path), "b" * 64)
    assert latest_checkpoint_step(str(tmp_path), "b" * 64) is None
    assert load_latest(str(tmp_path), FP)[0] == 3  # and it is valid for its own job
