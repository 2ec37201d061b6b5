"""A small transformer with dropout learning to reverse sequences (synthetic, seeded data).

shoal run examples/transformer.py --workers 2xv100 --steps 30 --out runs/transformer
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

import shoal

VOCAB, LENGTH = 16, 12


class ReverseDataset(torch.utils.data.Dataset):
    """Sample i is a random token sequence (seeded by i) and its reversal."""

    def __init__(self, size: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.inputs = torch.randint(1, VOCAB, (size, LENGTH), generator=g)

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int):
        x = self.inputs[i]
        return x, x.flip(0)


class Reverser(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.register_buffer("position", self._sinusoids(LENGTH, dim), persistent=False)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, VOCAB)

    @staticmethod
    def _sinusoids(length: int, dim: int) -> torch.Tensor:
        pos = torch.arange(length).unsqueeze(1)
        freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(length, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        return table

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.position))


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    tokens, target = batch
    return F.cross_entropy(model(tokens).reshape(-1, VOCAB), target.reshape(-1))


def make_job(
    micro_batch_size=16,
    global_batch_size=64,
    lr=1e-3,
    seed=0,
    dim=64,
    workload=None,
    clip_grad_norm=None,
    autocast=None,
    loss_scale=None,
) -> shoal.Job:
    return shoal.Job(
        model=lambda: Reverser(dim=dim),
        optimizer=lambda params: torch.optim.AdamW(params, lr=lr),
        dataset=ReverseDataset(4096, seed),
        loss_fn=loss_fn,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        seed=seed,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: min(1.0, (step + 1) / 10)
        ),
        workload=workload,
        clip_grad_norm=clip_grad_norm,
        autocast=autocast,
        loss_scale=loss_scale,
    )


if __name__ == "__main__":
    raise SystemExit(shoal.launch(make_job))
