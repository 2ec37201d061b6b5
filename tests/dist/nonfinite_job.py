"""A job for the non-finite tests: a tiny regression whose sample POISON makes its micro-batch's
loss (or, with -o where=grad, only its gradient) NaN. No shuffle: sample k is micro-batch
(k % 16) // 4 of step k // 16 in each epoch of 64 samples."""

import torch

import shoal


def loss_fn(model, batch):
    x, y, ok = batch
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
    # sqrt at 0 has an infinite slope: times 0 the value stays finite, the gradient is NaN
    return loss + 0.0 * torch.sqrt((model.weight * 0).sum() + ok.min())


def make_job(poison=-1, where="loss", seed=0):
    g = torch.Generator().manual_seed(0)
    x, y, ok = torch.randn(64, 3, generator=g), torch.randn(64, generator=g), torch.ones(64)
    if poison >= 0 and where == "loss":
        x[poison, 0] = float("nan")
    elif poison >= 0:
        ok[poison] = 0.0
    return shoal.Job(
        model=lambda: torch.nn.Linear(3, 1),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
        dataset=torch.utils.data.TensorDataset(x, y, ok),
        loss_fn=loss_fn,
        micro_batch_size=4,
        global_batch_size=16,
        seed=seed,
        shuffle=False,
    )
