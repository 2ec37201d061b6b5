"""A one-line console progress bar (loss and samples/s); plain lines when not on a terminal;
and a count in words for console lines."""

from __future__ import annotations

import sys
from typing import TextIO


def counted(n: int, noun: str) -> str:
    """`1 worker`, `3 workers`: a count and its noun, in the number the count takes."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
