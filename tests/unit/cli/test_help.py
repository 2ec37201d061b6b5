"""Every command's --help shows each option's default, once."""

import re

import pytest

from shoal.cli import build_parser, main


def help_of(capsys, *argv) -> str:
    """The options section of `shoal ARGV --help`, on one line (argparse wraps them)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split("options:", 1)[1].split())


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["run"], ["--peer-timeout SECONDS", "(default: 30.0)"]),
        (["run"], ["--replan-every N", "(default: 5)"]),
        (["simulate"], ["--seed SEED", "(default: 0)"]),  # 0 is shown, though it is falsy
        (["simulate"], ["--tick TICK", "(default: 60.0)"]),
        (["transient"], ["--runs RUNS", "(default: 200)"]),
        (["tune"], ["--device {cpu,cuda}", "(default: cpu)"]),
        (["demo"], ["--steps STEPS", "(default: 40)"]),
    ],
)
def test_an_options_default_is_in_its_help(capsys, argv, shown):
    text = help_of(capsys, *argv)
    option, default = shown
    start = text.index(option)
    nxt = re.search(r" --?[a-z]", text[start + len(option) :])
    entry = text[start : start + len(option) + (nxt.start() if nxt else len(text))]
    assert default in entry, entry


@pytest.mark.parametrize("command", ["run", "simulate", "transient", "tune", "demo", "report"])
def test_no_option_says_its_default_twice_or_shows_none(capsys, command):
    text = help_of(capsys, command)
    for entry in re.split(r" (?=--?[a-z])", text):
        assert entry.count("default") <= 1, entry
        assert "(default: None)" not in entry and "(default: False)" not in entry, entry


@pytest.mark.parametrize("command", sorted(build_parser()._subparsers._group_actions[0].choices))
def test_every_command_describes_itself_above_its_options(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])  # torchrun's help is its own parser's, printed by the command
    above = capsys.readouterr().out.split("options:", 1)[0].split("\n\n", 1)
    assert len(above) == 2 and above[1].strip(), f"shoal {command} --help has no description"
