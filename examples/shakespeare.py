"""A character-level causal transformer on Shakespeare (the corpus ships inside shoal).

shoal run examples/shakespeare.py --workers v100,k80 --steps 40 --out runs/shakespeare

Sample i is a window of CONTEXT + 1 characters starting at i * STRIDE in the training part of the
text (its first 90 %); the model predicts each next character. `validation_loss` scores a model
on fixed windows of the last 10 %, which no training sample reads.
"""

import functools
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

import shoal

CONTEXT, STRIDE = 32, 7


def corpus() -> str:
    return resources.files("shoal.data").joinpath("text", "tinyshakespeare.txt").read_text()


def encode(text: str) -> tuple[torch.Tensor, int]:
    """The text as character ids (the alphabet sorted, so ids are the same everywhere)."""
    alphabet = sorted(set(text))
    index = {c: i for i, c in enumerate(alphabet)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), len(alphabet)


class Windows(torch.utils.data.Dataset):
    """Windows of CONTEXT + 1 ids every `stride` characters of `ids`: (input, next ids)."""

    def __init__(self, ids: torch.Tensor, stride: int = STRIDE):
        self.ids, self.stride = ids, stride

    def __len__(self) -> int:
        return (len(self.ids) - CONTEXT - 1) // self.stride

    def __getitem__(self, i: int):
        window = self.ids[i * self.stride : i * self.stride + CONTEXT + 1]
        return window[:-1], window[1:]


@functools.cache  # read and encoded once per process (make_job, evaluation)
def splits() -> tuple[Windows, Windows, int]:
    """(training windows, validation windows, vocabulary size): the first 90 % and the rest."""
    ids, vocab = encode(corpus())
    cut = len(ids) * 9 // 10
    return Windows(ids[:cut]), Windows(ids[cut:], stride=CONTEXT), vocab


class CharModel(nn.Module):
    def __init__(self, vocab: int, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(CONTEXT, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)
        causal = torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        n = tokens.shape[1]
        return self.head(self.blocks(x, mask=self.causal[:n, :n], is_causal=True))


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    tokens, target = batch
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def validation_loss(model: nn.Module, windows: int = 512) -> float:
    """Mean next-character loss over the first `windows` validation windows."""
    _, val, _ = splits()
    n = min(windows, len(val))
    tokens = torch.stack([val[i][0] for i in range(n)])
    target = torch.stack([val[i][1] for i in range(n)])
    model.eval()
    with torch.no_grad():
        return float(loss_fn(model, (tokens, target)))


def make_job(micro_batch_size=16, global_batch_size=64, lr=2e-3, seed=0, dim=64) -> shoal.Job:
    train, _, vocab = splits()
    return shoal.Job(
        model=lambda: CharModel(vocab, dim=dim),
        optimizer=lambda params: torch.optim.AdamW(params, lr=lr),
        dataset=train,
        loss_fn=loss_fn,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        seed=seed,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: min(1.0, (step + 1) / 10)
        ),
    )


if __name__ == "__main__":
    raise SystemExit(shoal.launch(make_job))
