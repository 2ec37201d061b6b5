"""The examples and `shoal demo`, run as a user would (`python -m shoal ...`) with a few steps:
each must finish and report a state digest, and leave its result in the output folder."""

from __future__ import annotations

import json
import re

import pytest
from _smoke import json_lines, run

pytestmark = pytest.mark.dist  # each starts worker processes with a real process group

DONE = re.compile(
    r"^done: 2 steps in [\d.]+s \([\d.]+s with start-up\), [\d,]+ samples/s, "
    r"state_sha256 ([0-9a-f]{64})$"
)


@pytest.mark.parametrize(
    ("example", "workers"),
    [
        # examples/digits.py: the demo below runs it, on v100,k80,k80 and on one worker
        ("examples/transformer.py", "v100"),
        ("examples/shakespeare.py", "v100"),
    ],
)
def test_example_runs_two_steps(example, workers, tmp_path):
    out = tmp_path / "run"
    argv = ["-m", "shoal", "run", example, "--workers", workers, "--steps", "2", "--out", str(out)]
    lines = run(argv).stdout.splitlines()
    match = DONE.match(lines[-1])
    assert match, f"unexpected last line: {lines[-1]!r}"
    results = [p for p in out.rglob("*.json") if p.is_file()]
    assert results, f"no JSON result under {out}"
    digests = {json.loads(p.read_text()).get("state_sha256") for p in results} - {None}
    assert digests == {match.group(1)}
    assert not json_lines("\n".join(lines))  # the run prints its summary, not raw records


def test_demo_three_steps(tmp_path):
    proc = run(["-m", "shoal", "demo", "--steps", "3", "--out", str(tmp_path)])
    text = proc.stdout
    assert re.search(r"^mixed +v100,k80,k80 +[\d,]+ ", text, re.M), text
    assert re.search(r"^single +v100 +[\d,]+ ", text, re.M), text
    assert "digests identical: YES" in text
