"""The user-facing error type.

A `UserError` means the input (a config, a flag, a trace, a checkpoint) is wrong, not the code.
The CLI prints its message on one line and exits with code 2; library callers catch it as a
`ValueError`.
"""


class UserError(ValueError):
    """Bad input from the user; the message names the problem in one line."""


class RunFailed(RuntimeError):
    """A run could not finish (for example every worker was lost); the message says what to do."""
