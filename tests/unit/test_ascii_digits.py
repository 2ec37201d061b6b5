"""Counts and numbers in the CLI's grammars are ASCII digits: Python's int() and the regex \\d
also take other scripts' digits (int('２') == 2), so `--workers ２xt4` started two T4 workers
and `step 5: kill ２` named a worker 'w２' that no worker is. Each is refused in one line."""

import argparse
import pathlib

import pytest

from shoal.cli import build_parser, main
from shoal.config.provider import ProviderConfig
from shoal.errors import UserError

DIGITS = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "digits.py")
FULL_TWO = "\uff12"  # FULLWIDTH DIGIT TWO: int() reads 2
ARABIC_TWO = "\u0662"  # ARABIC-INDIC DIGIT TWO


@pytest.mark.parametrize("two", [FULL_TWO, ARABIC_TWO])
def test_worker_counts(two):
    from shoal.perf.devices import load_devices

    with pytest.raises(UserError, match=f"^bad worker spec item '{two}xt4' .*; N in ASCII digits"):
        load_devices().parse_workers(f"{two}xt4")
    assert load_devices().parse_workers("2xt4") == ["t4", "t4"]


def test_run_refuses_them_before_any_worker(tmp_path, capsys):
    """(--resume of no directory is refused after --workers: no run would start either way)"""
    none = str(tmp_path / "none")
    argv = ["run", DIGITS, "--steps", "2", "--resume", none, "--workers"]
    for workers in (f"{FULL_TWO}xk80", f"{FULL_TWO}xk80:spot --provider local".split()):
        extra = [workers] if isinstance(workers, str) else workers
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"shoal: error: bad worker spec item '{FULL_TWO}xk80") and (
            err.count("\n") == 1
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", DIGITS, "--workers", "k80", "--out", "o", "--steps", FULL_TWO],
        ["run", DIGITS, "--workers", "k80", "--out", "o", "--steps", "2", "--threads", ARABIC_TWO],
        ["simulate", "--seed", FULL_TWO],
        ["transient", "--cluster", "k80", "--runs", FULL_TWO],
        ["demo", "--steps", FULL_TWO],
        ["tune", "--memory-cap-mb", "100", "--trials", FULL_TWO],
    ],
)
def test_integer_flags(argv, capsys):
    args = _refused_then_read_in_ascii(argv, "int", capsys)
    assert 2 in vars(args).values()  # ASCII digits as before


def _refused_then_read_in_ascii(argv: list[str], kind: str, capsys):
    """`argv` is refused in one line, exit 2, naming the invalid `kind` value; the same flags
    in ASCII digits parse: their namespace."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert f"invalid {kind} value" in err and "ASCII digits" in err
    return build_parser().parse_args(
        [a.replace(FULL_TWO, "2").replace(ARABIC_TWO, "2") for a in argv]
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--tick", FULL_TWO + "0"],
        ["simulate", "--restart-s", ARABIC_TWO],
        ["simulate", "--rescale-s", FULL_TWO],
        ["tune", "--memory-cap-mb", FULL_TWO + "00"],
        ["tune", "--memory-cap-mb", "100", "--timeout-s", FULL_TWO],
        [
            "run",
            DIGITS,
            "--workers",
            "k80",
            "--out",
            "o",
            "--steps",
            "2",
            "--peer-timeout",
            FULL_TWO,
        ],
    ],
)
def test_float_flags(argv, capsys):
    args = _refused_then_read_in_ascii(argv, "float", capsys)
    assert any(v in (2.0, 20.0, 200.0) for v in vars(args).values())  # ASCII digits as before


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400"])
def test_float_flags_are_finite(text, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["simulate", f"--tick={text}"])  # (-inf: not an option)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert f"invalid float value: {text!r} (a finite number)" in err


def test_ascii_float():
    from shoal.cli.flags import ascii_float

    assert ascii_float("2.5") == 2.5 and ascii_float("1e3") == 1000.0 and ascii_float("-0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="^invalid float value: 'x'$"):
        ascii_float("x")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["simulate", "--spot", f"0.{FULL_TWO}"], "bad --spot fraction"),
        (["simulate", "--workload", f"philly:{FULL_TWO}"], "bad number"),
        (["simulate", "--workload", f"philly:1:{ARABIC_TWO}"], "bad number"),
        (["tune", "--memory-cap-mb", "1", "--batch-sizes", f"1,{FULL_TWO}"], "ASCII digits only"),
        (["tune", "--memory-cap-mb", "1", "--ckpt-ratios", f"0.{FULL_TWO}"], "ASCII digits only"),
    ],
)
def test_numbers_inside_specs(argv, needle, capsys):
    """`--spot ０.5` bought half the nodes as spot, `philly:２` sampled two jobs, and tune's
    `--batch-sizes １` measured micro-batch size 1: float() and int() read them."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("shoal: error: ") and needle in err and err.count("\n") == 1


def test_cluster_specs():
    from shoal.cluster.nodes import parse_cluster
    from shoal.sim.transient_spec import parse_cluster as transient_cluster

    with pytest.raises(UserError, match=f"^bad cluster item '{FULL_TWO}x4xt4'"):
        parse_cluster(f"{FULL_TWO}x4xt4")
    with pytest.raises(UserError, match=f"bad cluster item '{FULL_TWO}xk80:spot'"):
        transient_cluster(f"{FULL_TWO}xk80:spot")


@pytest.mark.parametrize(
    "text, needle",
    [
        (f"step {FULL_TWO}: kill 1", "cannot parse"),
        (f"step 5: kill {FULL_TWO}", "bad worker"),
        (f"at {FULL_TWO}s: add k80", "cannot parse"),
        (f"step 5: notice 1 {FULL_TWO}s", "cannot parse"),
    ],
)
def test_events(text, needle):
    from shoal.launcher.events import parse_events

    with pytest.raises(UserError, match=f"^--events: item 1: {needle}"):
        parse_events(text)


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"quota": ("k80:spot=" + FULL_TWO,)}, "--quota: expected KIND:TIER=N"),
        ({"quota": ("k80:spot=\u00b2",)}, "--quota: expected KIND:TIER=N"),  # was int()'s words
        ({"autoscale": True, "deadline": FULL_TWO + "h"}, "--deadline: expected a duration"),
        # each was taken as its ASCII number
        ({"notice": FULL_TWO + "0"}, "--notice: expected seconds or none"),
        ({"autoscale": True, "budget": FULL_TWO + "usd"}, "--budget: expected an amount"),
        ({"outages": (f"k80:spot:{FULL_TWO}-5",)}, "--outage: expected KIND:TIER:A-B"),
    ],
)
def test_provider_flags(fields, needle):
    with pytest.raises(UserError, match=f"^{needle}"):
        ProviderConfig(name="local", kinds="k80", **fields)


def test_compress_keep():
    from shoal.config.slowlink import SlowLinkConfig

    with pytest.raises(UserError, match=f"^--compress topk:0.{FULL_TWO}: KEEP must be a number"):
        SlowLinkConfig(compress=f"topk:0.{FULL_TWO}")  # was a keep ratio of 0.2
    assert SlowLinkConfig(compress="topk:0.5").compress == "topk:0.5"


@pytest.mark.parametrize(
    "params, needle",
    [
        ({"bounds": (16, 64), "gamma": f"0.{FULL_TWO}"}, "option gamma='0.２' is not a float"),
        ({"bounds": None, "name": "schedule", "ramp": f"{FULL_TWO}56@0"}, "ramp='２56@0' is not"),
    ],
)
def test_batch_policy_options(params, needle):
    from shoal.control.batch_policy import make_policy

    name = params.pop("name", "jabas")
    with pytest.raises(UserError, match=f"^{needle}"):
        make_policy(name, micro_batch_size=16, **params)
    ascii_params = {
        k: v.replace(FULL_TWO, "2") if isinstance(v, str) else v for k, v in params.items()
    }
    make_policy(name, micro_batch_size=16, **ascii_params)  # ASCII digits as before


def test_batch_bounds():
    from shoal.control.batch_policy_base import parse_bounds

    with pytest.raises(UserError, match="^batch bounds '１６:64' are not LOW:HIGH"):
        parse_bounds("\uff11\uff16:64")  # was (16, 64)
    assert parse_bounds("16:64") == (16, 64)


@pytest.mark.parametrize("text", [f"k80,{FULL_TWO}00\n", f"{FULL_TWO},add,n1\n3,remove,n1\n"])
def test_spot_trace(text, tmp_path):
    """A lifetime or a time in other scripts' digits was taken as its ASCII number."""
    from shoal.cluster.provider import load_spot_trace

    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    with pytest.raises(UserError, match=f"^{trace}:1: expected 'ms,add|remove,node'"):
        load_spot_trace(str(trace))
    trace.write_text(text.replace(FULL_TWO, "2"))
    assert load_spot_trace(str(trace))  # ASCII digits as before
