"""Error types of the schedule language.

Every bad schedule raises ONE error whose message names the module path and the primitive, e.g.
``shard('weight', axis=0) on 'mlp.fc1': dimension 0 of weight has size 10, which is not
divisible by the world size 4``.
`ScheduleError` is both a `ValueError` (via shoal's `UserError`, so the CLI prints it on one line)
and a `RuntimeError` (what Slapo raised for most schedule mistakes), so Slapo programs that catch
either keep working.
"""

from __future__ import annotations

from shoal.errors import UserError


class ScheduleError(UserError, RuntimeError):
    """A schedule primitive was applied where it is invalid."""


class SchedulePathError(ScheduleError, KeyError):
    """A submodule path does not exist in the schedule tree (also a `KeyError`, as in Slapo)."""

    def __str__(self) -> str:  # KeyError would quote the message; keep it readable
        return str(self.args[0]) if self.args else ""


class VerificationError(ScheduleError, AssertionError):
    """`Verify` found that the scheduled model does not compute what the original computes."""


def schedule_error(primitive: str, path: str, message: str) -> ScheduleError:
    """Build the canonical one-line message: ``<primitive> on '<path>': <message>``."""
    where = path if path else "<root>"
    return ScheduleError(f"{primitive} on '{where}': {message}")
