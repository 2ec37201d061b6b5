"""The front door, fuzzed: any --workers, --events, -o or flag value either works or is refused
with one line (a ValueError, which the CLI prints as `shoal: error: ...` with exit code 2):
never another exception, never a hang, never a file written."""

import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.cli import build_parser
from shoal.cli.run import config_from_args
from shoal.config import CheckpointConfig, RunConfig
from shoal.job import parse_options
from shoal.launcher.events import parse_events
from shoal.perf.devices import load_devices

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEVICES = load_devices()

# text near the grammars, so that examples reach deep into them, plus plain noise
KINDS = st.sampled_from(["v100", "k80", "t4", "a100", "V100", "x", "", "0", "-1", "h100"])
COUNT = st.one_of(st.integers(-3, 3), st.integers(), st.just(10**40)).map(str)
WORKER_ITEM = st.one_of(
    KINDS, st.tuples(COUNT, st.sampled_from(["x", "*", " x "]), KINDS).map("".join), st.text()
)
WORKERS = st.lists(WORKER_ITEM, max_size=5).map(",".join)
NUMBER = st.one_of(
    st.integers(-5, 10**6).map(str), st.floats(allow_nan=True).map(str), st.just("9" * 5000)
)
WHEN = st.one_of(
    st.tuples(st.just("step "), NUMBER), st.tuples(st.just("at "), NUMBER, st.just("s"))
)
ACTION = st.one_of(
    st.tuples(st.sampled_from(["kill ", "leave ", "notice "]),
              st.sampled_from(["0", "w1", "random", "x", "-1", "9" * 30])),
    st.tuples(st.just("add "), KINDS),
    st.tuples(st.just("notice 0 "), NUMBER, st.just("s")),
    st.tuples(st.just("kill 1 "), NUMBER, st.just("s")),
)  # fmt: skip
EVENT = st.one_of(
    st.tuples(WHEN.map("".join), st.just(": "), ACTION.map("".join)).map("".join), st.text()
)
EVENTS = st.lists(EVENT, max_size=4).map("; ".join)


def refused_in_one_line(fn, *args) -> None:
    """Run fn: it works, or raises a ValueError whose message is one line."""
    try:
        fn(*args)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), repr(exc)


@pytest.fixture(autouse=True)
def no_writes(tmp_path, monkeypatch):
    """Run in an empty directory and check it stays empty."""
    monkeypatch.chdir(tmp_path)
    yield
    assert list(tmp_path.iterdir()) == []


@FUZZ
@given(WORKERS)
def test_workers_grammar(text):
    refused_in_one_line(DEVICES.parse_workers, text)


@FUZZ
@given(EVENTS)
def test_events_grammar(text):
    refused_in_one_line(parse_events, text)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.text(),
            st.tuples(
                st.from_regex(r"[a-z_]\w{0,5}", fullmatch=True),
                st.just("="),
                st.one_of(st.text(), NUMBER, st.just("(" * 300 + ")" * 300)),
            ).map("".join),
        )
    )
)
def test_job_options(items):  # fmt: skip
    refused_in_one_line(parse_options, items)


FLAG_VALUE = st.one_of(NUMBER, st.text(max_size=8), st.sampled_from(["exact", "fast", "skip"]))
FLAGS = st.sampled_from(
    ["--steps", "--seed", "--replan-every", "--max-micro-batches", "--threads",
     "--checkpoint-every", "--checkpoint-seconds", "--consistency", "--on-nonfinite", "-o"]
)  # fmt: skip


@FUZZ
@given(st.lists(st.tuples(FLAGS, FLAG_VALUE), max_size=6))
def test_run_flags_give_a_valid_configuration_or_one_line_and_exit_2(pairs):
    argv = ["run", "job.py", "--workers", "v100", "--out", "out"]
    argv += [part for pair in pairs for part in pair]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            config = config_from_args(build_parser().parse_args(argv))
        except SystemExit as exc:  # argparse's refusal: one line, exit code 2
            assert exc.code == 2
            lines = err.getvalue().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("shoal: error: "), err.getvalue()
            return
        except ValueError as exc:
            assert "\n" not in str(exc).strip()
            return
    assert RunConfig.from_json(config.to_json()) == config  # it crosses to workers intact
    assert config.steps >= 1 and config.threads >= 1 and config.checkpoint.every >= 0


@FUZZ
@given(
    st.one_of(st.integers(), st.floats()),
    st.one_of(st.integers(), st.floats()),
    st.one_of(st.none(), st.text()),
)
def test_checkpoint_configuration(every, seconds, where):
    refused_in_one_line(lambda: CheckpointConfig(every, seconds, where))
