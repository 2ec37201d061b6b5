"""Bad adaptive-batch input to `shoal run` is one line on stderr and exit code 2, before any
worker starts."""

import pathlib

import pytest

from shoal.cli import main

DIGITS = str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py")  # b = 16


# the policy's own messages are control.batch_policy's to word: the needle is only the bad
# value the message must name, so that an unrelated one-line error does not pass
@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--batch-policy", "nope"], "nope"),
        (["--batch-policy", "jabas", "--batch-bounds", "30:256"], "30:256"),
        (["--batch-policy", "jabas", "--batch-bounds", "256:32"], "256:32"),
        (["--batch-policy", "jabas", "--batch-bounds", "lots"], "lots"),
        (["--batch-policy", "jabas", "--batch-option", "gamma=1.5"], "gamma"),
        (["--batch-policy", "jabas", "--batch-option", "gamma=-1"], "gamma"),
        (["--batch-policy", "jabas", "--batch-every", "0"], "--batch-every"),
        (["--batch-policy", "jabas", "--consistency", "fast"], "--consistency exact"),
        (["--batch-policy", "pollux", "--batch-reference", "v100,tpu9"], "tpu9"),
    ],
)
def test_bad_batch_input_is_one_line_and_exit_2(capsys, tmp_path, extra, needle):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path), *extra]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any worker started
