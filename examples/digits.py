"""A small CNN with BatchNorm and Dropout on scikit-learn's digits (8x8 images, 10 classes).

With `-o augment=True` every read of an image shifts it by up to a pixel at random: the
draws are seeded by (seed, step, micro-batch), so the result stays bitwise the same on any
workers.

shoal run examples/digits.py --workers v100,k80,k80 --steps 30 --out runs/digits
torchrun --nproc-per-node 2 -m shoal.worker examples/digits.py --steps 30 --out runs/t
"""

import importlib.util
import pathlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import shoal


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(64, 10),
    )


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, read from the CSV inside its wheel (importing sklearn is slow)."""
    root = pathlib.Path(importlib.util.find_spec("sklearn").submodule_search_locations[0])
    table = np.loadtxt(root / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


class Shifted(torch.utils.data.Dataset):
    """Images shifted by -1, 0 or +1 pixel along each axis, drawn at every read."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        dy, dx = torch.randint(-1, 2, (2,)).tolist()
        return torch.roll(self.images[i], shifts=(dy, dx), dims=(1, 2)), self.labels[i]


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def make_job(
    micro_batch_size=16,
    global_batch_size=64,
    lr=0.05,
    seed=0,
    workload=None,
    augment=False,
    clip_grad_norm=None,
    autocast=None,
    loss_scale=None,
) -> shoal.Job:
    x, y = load_digits()
    images = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(y)
    dataset = Shifted(images, labels) if augment else torch.utils.data.TensorDataset(images, labels)
    return shoal.Job(
        model=make_model,
        optimizer=lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9),
        dataset=dataset,
        loss_fn=loss_fn,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        seed=seed,
        workload=workload,
        clip_grad_norm=clip_grad_norm,
        autocast=autocast,
        loss_scale=loss_scale,
    )


if __name__ == "__main__":
    raise SystemExit(shoal.launch(make_job))
