"""A one-line console progress bar (loss and samples/s); plain lines when not on a terminal;
a count in words for console lines; the line a finished run ends with; and the console streams
of a command, which outlive their reader."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

# the reader of a console stream went away: a pipe closed (`| head`), a terminal hung up
_READER_GONE = {errno.EPIPE, errno.EIO}


def counted(n: int, noun: str) -> str:
    """`1 worker`, `3 workers`: a count and its noun, in the number the count takes."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def done_line(result: dict, took: str) -> str:
    """`done: 30 steps in 1.2s (4.0s with start-up), ...`: a finished run's result.json in one
    line; `took` is the command's own time (or "earlier": a run finished before)."""
    return (
        f"done: {result['final_step']} steps in {result['wall_time_s']:.1f}s "
        f"({took}), {result['samples_per_s']:,.0f} samples/s, "
        f"state_sha256 {result['state_sha256']}"
        + (f", cost ${result['cost']['usd']:.4f}" if result.get("cost") else "")
    )


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, width: int = 28):
        self.total, self.width = max(total, 1), width
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._last_line_at = -1

    def update(self, done: int, loss: float, samples_per_s: float) -> None:
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * self.width)
        text = (
            f"[{bar:<{self.width}}] {done}/{self.total} steps  loss {loss:.4f}  "
            f"{samples_per_s:,.0f} samples/s"
        )
        if self.tty:
            self.stream.write("\r" + text)
        elif done == self.total or done * 10 // self.total > self._last_line_at:
            self._last_line_at = done * 10 // self.total
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class ConsoleStream:
    """stdout or stderr of a command whose reader may go away: a pipe closed early (`| head`,
    or a `| tee` ended by the same Ctrl-C) or a terminal hung up. From then on what is written
    is dropped (the stream's file descriptor points at /dev/null) instead of raising: the
    error stopped a training run mid-step, before the checkpoint an interrupt writes, and
    turned a finished one into a traceback and exit code 1. The run's record is its files."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self._guarded(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self.stream.flush)

    def _guarded(self, call, *args) -> None:
        try:
            call(*args)
        except OSError as exc:
            if exc.errno not in _READER_GONE:
                raise
            # what is still buffered, and every later write, goes nowhere: flushed at exit
            # it failed again ("Exception ignored ... BrokenPipeError", exit code 120)
            with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's capture)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stream.fileno())
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def console_outlives_its_reader() -> Iterator[None]:
    """sys.stdout and sys.stderr as ConsoleStreams for the duration of a command."""
    saved = sys.stdout, sys.stderr  # None where the descriptor was closed (`>&-`)
    sys.stdout, sys.stderr = (ConsoleStream(s) if s is not None else None for s in saved)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()  # while a broken pipe is still dropped, not raised
        sys.stdout, sys.stderr = saved
