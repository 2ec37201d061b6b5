import re

import pytest

from shoal.errors import UserError
from shoal.launcher.events import Event, parse_events


def test_inline_events():
    events = parse_events(
        "step 10: kill 1; step 20: add K80; step 35: notice 0 30s; at 2.5s: "
        "leave w2; step 3: kill random"
    )
    assert events == [
        Event("kill", step=10, worker="w1"),
        Event("add", step=20, kind="k80"),
        Event("notice", step=35, worker="w0", deadline_s=30.0),
        Event("leave", at_s=2.5, worker="w2"),
        Event("kill", step=3, worker="random"),
    ]
    assert events[0].due(10, 0.0) and not events[0].due(9, 99.0)
    assert events[3].due(0, 2.5) and not events[3].due(100, 2.0)


def test_a_stall_has_a_length():
    (stall,) = parse_events("step 7: stall random 10s")
    assert stall == Event("stall", step=7, worker="random", deadline_s=10.0)
    assert str(stall) == "step 7: stall random 10s"


def test_events_file(tmp_path):
    f = tmp_path / "ev.txt"
    f.write_text("# a revocation trace\nstep 4: kill 0\n\nstep 6: add v100  # replacement\n")
    assert [e.action for e in parse_events(str(f))] == ["kill", "add"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("step x: kill 1", "cannot parse"),
        ("step 3: explode 1", "cannot parse"),
        ("step 3: kill bob", "bad worker"),
        ("step 3: kill 1 30s", "only a notice or a stall takes seconds"),
        ("step 3: stall 1", "a stall needs its length"),
        ("no-such-file.txt", "no such events file"),
        ("kill 1", "cannot parse 'kill 1'"),  # an inline list that forgot its 'step N:'
        ("step 3 kill 1; step 4: add k80", "cannot parse 'step 3 kill 1'"),
    ],
)
def test_bad_events_name_the_problem(text, needle):
    with pytest.raises(UserError, match=needle):
        parse_events(text)


def test_an_events_folder_is_named_a_folder(tmp_path):
    """Was "no such events file" for a folder that exists; a name too long for the filesystem
    is still no such file (not an OSError)."""
    with pytest.raises(UserError, match="^--events: a folder, not an events file '.*'$"):
        parse_events(str(tmp_path))
    with pytest.raises(UserError, match="^--events: no such events file 'xxx"):
        parse_events("x" * 5000)


def test_an_events_file_that_is_not_text(tmp_path):
    """Binary garbage was "'utf-8' codec can't decode byte 0xff", naming no file or flag."""
    f = tmp_path / "ev.bin"
    f.write_bytes(b"\x00\xff\xfe garbage")
    with pytest.raises(UserError, match=r"--events .*ev\.bin: not UTF-8 text$"):
        parse_events(str(f))


def test_an_events_file_error_names_its_line(tmp_path):
    """A file's ';' lists were counted as items: the third line was 'item 4'."""
    f = tmp_path / "ev.txt"
    f.write_text("step 1: kill 1; step 2: add k80\n# a comment\nstep 2: explode 1\n")
    where = re.escape(f"{f}: line 3: cannot parse 'step 2: explode 1'")
    with pytest.raises(UserError, match=f"^{where}"):
        parse_events(str(f))
    with pytest.raises(UserError, match=r"^--events: item 2: cannot parse"):
        parse_events("step 1: kill 1; step 2: explode 1")


def test_an_events_file_may_start_with_a_byte_order_mark(tmp_path):
    """As workload and trace files may: it was "cannot parse '\\ufeffstep 1: add k80'"."""
    f = tmp_path / "ev.txt"
    f.write_bytes("\ufeffstep 1: add k80\n".encode())
    assert parse_events(str(f)) == [Event("add", step=1, kind="k80")]


@pytest.mark.parametrize(
    "item", ["at {big}s: kill 1", "step 1: notice 1 {big}s", "step 1: stall 1 {big}s"]
)
def test_seconds_past_the_float_range_are_refused(item):
    """400 digits of seconds parsed as inf: an event 'at infs' (never due), a notice or a stall
    of infs, accepted without a word."""
    with pytest.raises(UserError, match=r"item 1: 401 digits of seconds are past the float range"):
        parse_events(item.format(big="1" + "0" * 400))
