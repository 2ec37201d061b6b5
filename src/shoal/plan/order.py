"""What each micro-batch reads and which random numbers it draws: pure functions of the seed.

The sample stream is the concatenation of per-epoch permutations of the dataset, epoch e being
permuted by a generator seeded with (seed, e). A step that starts at stream offset `offset`
(the number of samples consumed before it) gives micro-batch j the `micro_batch_size` samples
at positions offset + j*b .. offset + (j+1)*b - 1. Nothing depends on how many workers there
are, which of them computes micro-batch j, or how often the job restarted.

Random draws while micro-batch j of step t is read (augmentation in the dataset or the collate
function) come from generators seeded with `data_seed(seed, t, j)`, and those in its forward and
backward (dropout) from generators seeded with `micro_batch_seed(seed, t, j)`: a worker may
read a micro-batch ahead of time, while the previous step's collective is in flight.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from shoal.errors import UserError


def _mix(*parts: int) -> int:
    """A stable 63-bit hash of integers (stable across processes, unlike hash())."""
    data = b"".join(int(p).to_bytes(16, "little", signed=True) for p in parts)
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") & (2**63 - 1)


def micro_batch_seed(seed: int, step: int, micro_batch: int) -> int:
    return _mix(seed, step, micro_batch, 0x5EED)


def data_seed(seed: int, step: int, micro_batch: int) -> int:
    return _mix(seed, step, micro_batch, 0xDA7A)


@dataclass
class DataOrder:
    dataset_size: int
    micro_batch_size: int
    seed: int
    shuffle: bool = True
    _cache: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.micro_batch_size < 1:
            raise UserError("micro_batch_size must be >= 1")
        if self.dataset_size < self.micro_batch_size:
            raise UserError(
                f"the dataset has {self.dataset_size} samples, fewer than one micro-batch "
                f"({self.micro_batch_size})"
            )

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) > 2:
                self._cache.clear()
            if self.shuffle:
                rng = np.random.Generator(np.random.PCG64(_mix(self.seed, epoch, 0xE90C)))
                self._cache[epoch] = rng.permutation(self.dataset_size)
            else:
                self._cache[epoch] = np.arange(self.dataset_size)
        return self._cache[epoch]

    def sample_ids(self, offset: int, micro_batch: int) -> list[int]:
        """Dataset indices read by micro-batch `micro_batch` of the step starting at `offset`."""
        n = self.dataset_size
        start = offset + micro_batch * self.micro_batch_size
        stop = start + self.micro_batch_size
        parts = [
            self.permutation(e)[max(start - e * n, 0) : min(stop - e * n, n)]
            for e in range(start // n, (stop - 1) // n + 1)  # a micro-batch may span epochs
        ]
        return np.concatenate(parts).tolist()
