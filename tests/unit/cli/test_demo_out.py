"""`shoal demo --out` where an earlier demo kept its runs: refused in the demo's own words
before any run (the run's refusal said "pass --resume", a flag the demo does not have)."""

import pytest

from shoal.cli import main


@pytest.mark.parametrize("name", ["mixed", "single"])
def test_an_out_holding_an_earlier_demo_is_refused(tmp_path, capsys, name):
    ckpts = tmp_path / name / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "ckpt-00000003.json").write_text("{}")
    assert main(["demo", "--out", str(tmp_path), "--steps", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"shoal: error: --out {tmp_path}: {tmp_path / name} holds an earlier run; "
        "choose another --out\n"
    )
    assert captured.out == ""  # no run started
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        [name, "checkpoints", "ckpt-00000003.json"]
    )
