"""Injected membership events for `shoal run --events`: revocations, kills and joins.

Format: items separated by ';' or newlines, each `step N: ACTION` or `at T s: ACTION`:
    kill W          SIGKILL worker W (an abrupt loss: no notice)
    notice W [Ds]   a revocation notice: SIGTERM now, SIGKILL after D seconds if still there
    leave W         a graceful leave (a notice with no deadline)
    stall W Ds      SIGSTOP worker W, SIGCONT it D seconds later (a swap storm, a VM freeze):
                    past --peer-timeout its group goes on without it, and it rejoins
    add KIND        a new worker of that device kind joins
W is a worker number (w0, w1, ... in order of creation; `1` and `w1` both work) or `random`:
a member chosen by the controller's seeded generator when the event fires (it waits while
only one member is left). A spot trace converts into the same list. An event fires at the
controller's next poll after it is due, so with very short steps it lands a few steps late.
"""

from __future__ import annotations

import math
import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from shoal.errors import UserError, unreadable

# [0-9], not \d: other scripts' digits are \d, and int() reads them ('２' is 2)
_ITEM = re.compile(
    r"^(?:step\s+(?P<step>[0-9]+)|at\s+(?P<at>[0-9]+(?:\.[0-9]+)?)\s*s)\s*:\s*"
    r"(?P<action>kill|notice|leave|stall|add)\s+(?P<arg>\S+)"
    r"(?:\s+(?P<deadline>[0-9]+(?:\.[0-9]+)?)\s*s)?$"
)


@dataclass(frozen=True)
class Event:
    action: str  # kill | notice | leave | stall | add
    step: int | None = None  # fire once this many steps have completed
    at_s: float | None = None  # or this many seconds after launch
    worker: str | None = None  # w<N> for kill/notice/leave
    kind: str | None = None  # device kind for add
    deadline_s: float | None = None  # notice: seconds until a hard kill; stall: its length

    def __str__(self) -> str:
        """The event as it is written in --events, e.g. `step 100: add k80`."""
        when = f"step {self.step}" if self.step is not None else f"at {self.at_s:g}s"
        what = self.kind if self.action == "add" else self.worker
        deadline = f" {self.deadline_s:g}s" if self.deadline_s is not None else ""
        return f"{when}: {self.action} {what}{deadline}"

    def due(self, steps_done: int, elapsed_s: float) -> bool:
        if self.step is not None:
            return steps_done >= self.step
        return elapsed_s >= self.at_s


def named(events: list[Event], first: int = 3) -> str:
    """Events as one warning names them: `event 'step 9: kill w1'`, or their count and the
    first few, `40 events ('step 9: kill w1', ... and 37 more)` (a file of many events past
    --steps printed a warning per event)."""
    if len(events) == 1:
        return f"event '{events[0]}'"
    shown = ", ".join(f"'{e}'" for e in events[:first])
    more = f" and {len(events) - first} more" if len(events) > first else ""
    return f"{len(events)} events ({shown}{more})"


def _is(text: str, test: Callable[[pathlib.Path], bool]) -> bool:
    """`test` (Path.is_file, Path.is_dir) of the path `text`; False where it cannot be one."""
    try:
        return test(pathlib.Path(text))
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte
        return False


def _items(text: str, source: str) -> tuple[str, list[tuple[str, str]]]:
    """(where the items come from, [(`item N` or `line N`, item)]): an inline list or a file."""
    # a list (a colon, a separator, or words that are no file's name) or a file of events
    looks_inline = any(c in text for c in ":;\n") or (" " in text.strip())
    if looks_inline and not _is(text, pathlib.Path.is_file):
        items = text.replace("\n", ";").split(";")
        return source, [(f"item {n}", item) for n, item in enumerate(items, start=1)]
    path = pathlib.Path(text)
    if not _is(text, pathlib.Path.is_file):
        folder = _is(text, pathlib.Path.is_dir)
        what = "a folder, not an events file" if folder else "no such events file"
        raise UserError(f"{source}: {what} {text[:200]!r}")
    try:  # utf-8-sig: a byte-order mark, as an editor may write it, is no part of the first line
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{source} {path}: {unreadable(exc)}") from None
    return str(path), [(f"line {n}", i) for n, line in enumerate(lines, 1) for i in line.split(";")]


def _seconds(text: str | None, where: str) -> float | None:
    """A time or a length in seconds; digits past the float range (inf) are refused."""
    if not text:
        return None
    value = float(text)
    if not math.isfinite(value):
        raise UserError(f"{where}: {len(text)} digits of seconds are past the float range")
    return value


def parse_events(text: str, source: str = "--events") -> list[Event]:
    source, lines = _items(text, source)
    events = []
    for where, raw in lines:
        item = raw.split("#", 1)[0].strip()
        if not item:
            continue
        m = _ITEM.match(item)
        if not m:
            raise UserError(
                f"{source}: {where}: cannot parse {item!r} "
                "(expected e.g. 'step 10: kill 1' or 'at 5s: add k80')"
            )
        action, arg = m["action"], m["arg"]
        worker = kind = None
        if action == "add":
            kind = arg.lower()
        else:
            if arg != "random" and not re.fullmatch(r"w?[0-9]+", arg):
                raise UserError(f"{source}: {where}: bad worker {arg!r}")
            worker = arg if arg == "random" else "w" + arg.lstrip("w")
        deadline = _seconds(m["deadline"], f"{source}: {where}")
        if deadline is not None and action not in ("notice", "stall"):
            raise UserError(f"{source}: {where}: only a notice or a stall takes seconds")
        if action == "stall" and deadline is None:
            raise UserError(f"{source}: {where}: a stall needs its length, e.g. 'stall 1 10s'")
        events.append(
            Event(
                action,
                int(m["step"]) if m["step"] else None,
                _seconds(m["at"], f"{source}: {where}"),
                worker,
                kind,
                deadline,
            )
        )
    return events
