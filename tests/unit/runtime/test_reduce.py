"""Buffers cross the step's all-reduce as raw bits, whatever their dtype."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal
from shoal.runtime.reduce import bit_slots, bits_of, from_bits
from shoal.runtime.trainer import Trainer

DTYPES = [torch.bool, torch.uint8, torch.int64, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", [*DTYPES, torch.complex64, torch.complex128])
def test_a_buffer_of_any_dtype_comes_back_bit_for_bit(dtype):
    values = torch.randn(2, 3, dtype=torch.complex128) * 100
    values = values if dtype.is_complex else values.real
    values = values.to(dtype).contiguous()
    if dtype.is_floating_point or dtype.is_complex:  # a NaN with a payload: bits, not values
        values.reshape(-1)[0:1].view(torch.uint8)[:] = 255
    bits = bits_of(values)
    assert bits.dtype == torch.int64 and bits.numel() == bit_slots(values)
    shifted = torch.cat([torch.zeros(1, dtype=torch.int64), bits])[1:]  # at an odd offset
    back = from_bits(shifted, values)
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), values.view(torch.uint8))


class Rotary(nn.Module):
    """Rotary frequencies as a complex128 buffer (computed in float64, as some models do)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)
        angles = torch.arange(2, dtype=torch.float64)
        self.register_buffer("freqs", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x):
        z = torch.view_as_complex(x.reshape(-1, 2, 2).contiguous()) * self.freqs.to(torch.cfloat)
        return self.linear(torch.view_as_real(z).reshape(-1, 4))


def test_a_complex128_buffer_trains():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    job = shoal.Job(
        model=Rotary,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=torch.utils.data.TensorDataset(x, torch.arange(32) % 2),
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=8,
    )
    trainer = Trainer(job)
    freqs = trainer.model.freqs.clone()
    trainer.train_step()
    assert torch.equal(trainer.model.freqs, freqs)
