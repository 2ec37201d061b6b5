"""An empty value is bad input, not the flag left out: `--spot-trace ''` ran without the trace,
`--batch-policy ''` with the job's policy, `simulate --spot ''` with no spot nodes, and
`simulate --out ''` wrote its outputs to the current directory (Path('') is '.'). Each is
refused by argparse in one line, exit code 2, before any work."""

import pathlib

import pytest

from shoal.cli import build_parser

DIGITS = str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py")
RUN = ["run", DIGITS, "--workers", "k80", "--steps", "2", "--out", "o"]


@pytest.mark.parametrize(
    "argv, flag",
    [
        ([*RUN, "--events", ""], "--events"),
        ([*RUN, "--batch-policy", ""], "--batch-policy"),
        ([*RUN, "--checkpoint-dir", ""], "--checkpoint-dir"),
        ([*RUN, "--provider", "local", "--spot-trace", ""], "--spot-trace"),
        ([*RUN, "--provider", "local", "--kinds", ""], "--kinds"),
        (["run", DIGITS, "--workers", "k80", "--steps", "2", "--out", ""], "--out"),
        (["run", "", "--workers", "k80", "--steps", "2", "--out", "o"], "job"),
        (["simulate", "--out", ""], "--out"),
        (["simulate", "--spot", ""], "--spot"),
        (["simulate", "--policy", ""], "--policy"),  # was "--compare None names an empty policy"
        (["simulate", "--workload", ""], "--workload"),  # was "workload  is a directory"
        (["tune", "--memory-cap-mb", "100", "--out", ""], "--out"),  # was "--out .: is a dir..."
        (["demo", "--out", ""], "--out"),  # ran in a temporary directory
        (["report", ""], "DIR"),  # read the current directory
    ],
)
def test_empty_values_are_refused(argv, flag, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err == f"shoal: error: argument {flag}: expected a value, got ''\n"


def test_values_given_are_kept():
    args = build_parser().parse_args(["simulate", "--out", "x", "--spot", "0.5", "--policy", "a"])
    assert (args.out, args.spot, args.policy) == (pathlib.Path("x"), "0.5", "a")
    args = build_parser().parse_args([*RUN, "--batch-policy", "jabas", "--notice", "none"])
    assert (args.job, args.batch_policy, args.provider_notice) == (DIGITS, "jabas", "none")
    assert build_parser().parse_args(RUN).provider_notice == "30"  # a default, unchanged
