"""The model library: small-by-default, configurable-to-big models defined in the project.

Each model lives in its own module (`gpt2`, `bert`, `llama`, `wideresnet`) with a frozen config
dataclass. This package owns only the registry that lets tools (the autotuner, benchmarks, tests)
build any of them by name (with overrides checked against the config's field types), make a
synthetic batch for it and compute a training loss, without knowing the model's input
conventions.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from shoal.models.bert import Bert, BertConfig
from shoal.models.gpt2 import GPT, GPTConfig
from shoal.models.llama import Llama, LlamaConfig
from shoal.models.wideresnet import WideResNet, WideResNetConfig

__all__ = [
    "GPT",
    "GPTConfig",
    "Bert",
    "BertConfig",
    "Llama",
    "LlamaConfig",
    "WideResNet",
    "WideResNetConfig",
    "MODELS",
    "ModelEntry",
    "get_model_entry",
]


@dataclass(frozen=True)
class ModelEntry:
    """How to build, feed and train one model of the library.

    `make_inputs(cfg, batch_size, seq_len, generator)` returns the positional inputs of
    `forward`; `seq_len` is the token count for the language models and the image side for
    WideResNet. `loss(output, inputs)` returns a scalar training loss. `seq_len_field` names the
    config field that bounds `seq_len` (the positions a language model has embeddings or rotary
    angles for; a longer sequence fails inside the model), None where nothing does.
    """

    name: str
    config_cls: type
    model_cls: type[nn.Module]
    make_inputs: Callable[[Any, int, int, torch.Generator], tuple[torch.Tensor, ...]]
    loss: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor]
    seq_len_field: str | None = None

    def make_config(self, **overrides: Any) -> Any:
        """The default (tiny) config with `overrides`; unknown fields and values of the wrong
        type raise ValueError (an int is taken for a float field)."""
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"unknown {self.config_cls.__name__} field(s) {unknown}; known: {sorted(known)}"
            )
        hints = typing.get_type_hints(self.config_cls)
        typed = {
            key: _typed(f"{self.config_cls.__name__}.{key}", hints[key], value)
            for key, value in overrides.items()
        }
        return self.config_cls(**typed)

    def build(self, cfg: Any = None) -> nn.Module:
        return self.model_cls(cfg if cfg is not None else self.config_cls())


_EXPECTED = {bool: "true or false", int: "an integer", float: "a number"}


def _typed(name: str, kind: Any, value: Any) -> Any:
    """`value` checked against the field's annotation `kind`. The configs' own checks compare
    values (`n_layer < 1`), which a wrong type turns into a TypeError or, worse, lets through
    (`vocab_size=1.5` fails only when a tensor is sized by it)."""
    if kind not in _EXPECTED:  # a field type without a rule here: the config's own check
        return value
    if kind is float and type(value) is int:  # `dropout=0` from the command line
        return float(value)
    # bool is an int subclass, but True is no layer count and 1 is no switch
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{name} must be {_EXPECTED[kind]}, got {value!r}")
    return value


def _token_inputs(vocab_attr: str) -> Callable:
    def make(cfg: Any, batch_size: int, seq_len: int, gen: torch.Generator) -> tuple:
        vocab = getattr(cfg, vocab_attr)
        return (torch.randint(0, vocab, (batch_size, seq_len), generator=gen),)

    return make


def _next_token_loss(logits: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    # Predict token t+1 from tokens <= t (the synthetic batch is its own target).
    idx = inputs[0]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())


def _bert_loss(hidden: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    # A stand-in objective (the encoder has no MLM head). The mean square of *all* features is
    # constant after the final LayerNorm, so use half of them to get a gradient everywhere.
    return hidden.float()[..., : hidden.size(-1) // 2].pow(2).mean()


def _image_inputs(cfg: WideResNetConfig, batch_size: int, side: int, gen: torch.Generator):
    return (torch.randn(batch_size, cfg.in_channels, side, side, generator=gen),)


def _classify_loss(logits: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    # Deterministic labels from the batch index so the loss is reproducible.
    labels = torch.arange(logits.size(0), device=logits.device) % logits.size(1)
    return F.cross_entropy(logits, labels)


MODELS: dict[str, ModelEntry] = {
    "gpt2": ModelEntry(
        "gpt2", GPTConfig, GPT, _token_inputs("vocab_size"), _next_token_loss, "block_size"
    ),
    "bert": ModelEntry(
        "bert", BertConfig, Bert, _token_inputs("vocab_size"), _bert_loss, "max_position"
    ),
    "llama": ModelEntry(
        "llama", LlamaConfig, Llama, _token_inputs("vocab_size"), _next_token_loss, "max_seq_len"
    ),
    "wideresnet": ModelEntry(
        "wideresnet", WideResNetConfig, WideResNet, _image_inputs, _classify_loss
    ),
}


def get_model_entry(name: str) -> ModelEntry:
    """The registry entry for `name`; ValueError naming the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None
