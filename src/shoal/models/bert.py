"""A BERT-style bidirectional encoder in plain `torch.nn`.

This module owns the model definition only; `shoal.schedule.model_schedule.bert` parallelizes it.
Post-LayerNorm layers as in the original BERT. Attention keeps separate q/k/v Linears and
recovers the head count from the tensor shape, and the padding mask is passed to every layer as
an additive float tensor, so layers and attention trace with `torch.fx` and can be sharded by
whole heads without rewriting the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """Size of a BERT encoder. The defaults are tiny so that tests run on a CPU in seconds."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    max_position: int = 64
    type_vocab_size: int = 2
    dropout: float = 0.0
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"BertConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"BertConfig.dropout must be in [0, 1), got {self.dropout}")


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        return self.dropout(self.layer_norm(x + self.token_type_embeddings(token_type_ids)))


class BertSelfAttention(nn.Module):
    """Bidirectional multi-head attention with an additive mask of shape (B, 1, 1, T)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        hidden = cfg.hidden_size
        self.head_dim = hidden // cfg.num_heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = cfg.dropout
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        batch, seq = x.size(0), x.size(1)
        q = self.q_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_bias, dropout_p=p)
        y = y.transpose(1, 2).reshape(batch, seq, -1)
        return self.dropout(self.out_proj(y))


class BertMLP(nn.Module):
    """fc_in -> GELU -> fc_out -> dropout."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.fc_in = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc_out(self.act(self.fc_in(x))))


class BertLayer(nn.Module):
    """Post-LN encoder layer: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = BertSelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = BertMLP(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, mask_bias))
        return self.mlp_norm(x + self.mlp(x))


class Bert(nn.Module):
    """BERT encoder: `forward(input_ids, attention_mask=None, token_type_ids=None)` returns the
    final hidden states of shape (B, T, hidden_size). `attention_mask` is 1 for tokens to attend
    to and 0 for padding."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_layers))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        # 0 where attended, -1e4 at padding (as in the original BERT): added to the attention
        # scores. A constant rather than finfo(dtype).min keeps the forward fx-traceable.
        keep = attention_mask[:, None, None, :].to(x.dtype)
        mask_bias = (1.0 - keep) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x
