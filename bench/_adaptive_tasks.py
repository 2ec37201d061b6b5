"""The tasks of bench/adaptive_batch.py, as a shoal job file, and their held-out evaluation.

    shoal run bench/_adaptive_tasks.py -o task='digits' --workers v100 --steps 20 --out runs/t

- `digits`: examples/digits.py's CNN (SGD, momentum 0.9) on scikit-learn's digits; 300 images
  held out (a fixed permutation); `evaluate` gives the validation accuracy.
- `shakespeare`: examples/shakespeare.py's character-level causal transformer (AdamW, 10-step
  warm-up) on the shipped corpus's first 90 %; the validation loss on 512 windows of the last
  10 %.
- `reverse`: examples/transformer.py's transformer (AdamW, 10-step warm-up) learning to reverse
  sequences; the validation loss on 1,024 held-out sequences of another seed.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import torch

import shoal

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASKS = {
    # micro-batch size, base LR at the small batch, sweep of global batches, metric, better
    "digits": {"b": 16, "lr": 0.05, "sweep": (32, 64, 128, 256, 512), "metric": "accuracy"},
    "shakespeare": {"b": 16, "lr": 2e-3, "sweep": (32, 64, 128, 256, 512), "metric": "loss"},
    "reverse": {"b": 16, "lr": 1e-3, "sweep": (32, 64, 128, 256, 512), "metric": "loss"},
}
HELD_OUT_DIGITS = 300
PERMUTATION_SEED = 1234  # the train/validation split of digits: fixed, not the run's seed


@functools.cache  # evaluated at every checkpoint: load each example once per process
def _example(name: str):
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"shoal_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _digits_split():
    digits = _example("digits")
    x, y = digits.load_digits()
    images = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(PERMUTATION_SEED))
    train, val = order[:-HELD_OUT_DIGITS], order[-HELD_OUT_DIGITS:]
    labels = torch.tensor(y)
    return digits, (images[train], labels[train]), (images[val], labels[val])


def make_job(task="digits", micro_batch_size=16, global_batch_size=32, lr=0.05, seed=0):
    """The benchmark's job (this file is a shoal job file)."""
    warmup = lambda opt: torch.optim.lr_scheduler.LambdaLR(  # noqa: E731
        opt, lambda step: min(1.0, (step + 1) / 10)
    )
    adamw = lambda params: torch.optim.AdamW(params, lr=lr)  # noqa: E731
    if task == "digits":
        digits, (x, y), _ = _digits_split()
        model, dataset = digits.make_model, torch.utils.data.TensorDataset(x, y)
        optimizer = lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9)  # noqa: E731
        loss_fn, scheduler = digits.loss_fn, None
    elif task == "shakespeare":
        chars = _example("shakespeare")
        dataset, _, vocab = chars.splits()
        model = lambda: chars.CharModel(vocab)  # noqa: E731
        optimizer, loss_fn, scheduler = adamw, chars.loss_fn, warmup
    else:
        rev = _example("transformer")
        model, dataset = rev.Reverser, rev.ReverseDataset(4096, seed)
        optimizer, loss_fn, scheduler = adamw, rev.loss_fn, warmup
    return shoal.Job(
        model=model,
        optimizer=optimizer,
        dataset=dataset,
        loss_fn=loss_fn,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        seed=seed,
        lr_scheduler=scheduler,
    )


def evaluate(task: str, model_state: dict) -> float:
    """Validation accuracy (digits) or loss (shakespeare, reverse) of a checkpoint's model."""
    torch.manual_seed(0)
    if task == "shakespeare":
        chars = _example("shakespeare")
        model = chars.CharModel(chars.splits()[2])
        model.load_state_dict(model_state)
        return chars.validation_loss(model)
    if task == "digits":
        digits, _, (x, y) = _digits_split()
        model = digits.make_model()
    else:
        rev = _example("transformer")
        model, val = rev.Reverser(), rev.ReverseDataset(1024, 10_000)
        x, y = val.inputs, val.inputs.flip(1)
    model.load_state_dict(model_state)
    model.eval()
    with torch.no_grad():
        if task == "digits":
            return float((model(x).argmax(dim=1) == y).float().mean())
        return float(rev.loss_fn(model, (x, y)))
