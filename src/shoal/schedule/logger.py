"""`get_logger(name)`: a standard logger whose methods accept Slapo's ``ranks=`` keyword.

Messages with ``ranks=[0]`` are emitted only on those ranks. No handler is configured here
(libraries do not configure logging).
"""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as dist


class RankLogger(logging.LoggerAdapter):
    """Drops a record unless this process's rank is in ``ranks`` (when given)."""

    def log(self, level: int, msg: Any, *args: Any, ranks: Any = None, **kwargs: Any) -> None:
        if ranks is not None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            if rank not in ([ranks] if isinstance(ranks, int) else ranks):
                return
        super().log(level, msg, *args, **kwargs)

    def debug(self, msg: Any, *args: Any, **kw: Any) -> None:
        self.log(logging.DEBUG, msg, *args, **kw)

    def info(self, msg: Any, *args: Any, **kw: Any) -> None:
        self.log(logging.INFO, msg, *args, **kw)

    def warning(self, msg: Any, *args: Any, **kw: Any) -> None:
        self.log(logging.WARNING, msg, *args, **kw)

    def error(self, msg: Any, *args: Any, **kw: Any) -> None:
        self.log(logging.ERROR, msg, *args, **kw)


def get_logger(name: str = "shoal.schedule") -> RankLogger:
    return RankLogger(logging.getLogger(name), {})
