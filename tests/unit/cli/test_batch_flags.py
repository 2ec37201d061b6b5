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
        # the digits job's batch is 64: its first steps would run outside the bounds
        (["--batch-policy", "jabas", "--batch-bounds", "128:256"], "global_batch_size 64"),
    ],
)
def test_bad_batch_input_is_one_line_and_exit_2(capsys, tmp_path, extra, needle):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path), *extra]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any worker started


def test_bounds_with_the_fixed_policy_warn_that_they_do_nothing(capsys, tmp_path):
    from shoal.config import BatchConfig
    from shoal.job import build_job, load_job_file
    from shoal.runtime.batching import check_batch

    job = build_job(load_job_file(DIGITS), {}, None)
    check_batch(BatchConfig(bounds="128:256"), job, "exact")
    assert "--batch-bounds has no effect" in capsys.readouterr().err
    check_batch(BatchConfig(), job, "exact")
    assert capsys.readouterr().err == ""
