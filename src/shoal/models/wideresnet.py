"""A Wide Residual Network (pre-activation basic blocks) in plain `torch.nn`.

This module owns the model definition only; `shoal.schedule.model_schedule.wideresnet`
parallelizes it. All residual blocks sit in one flat `blocks` ModuleList so a checkpointing
schedule can pick a fraction of them by index; inside a block the two 3x3 convolutions are
`conv1` (widening) and `conv2` (narrowing), the pair a tensor-parallel schedule splits by
channels, with `bn2` in between holding per-channel state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class WideResNetConfig:
    """WRN-`depth`-`widen_factor`. The defaults (WRN-10-2, 8x8 inputs in tests) are tiny.

    `depth` must be 6n+4: n basic blocks in each of the three stages, plus stem and head.
    """

    depth: int = 10
    widen_factor: int = 2
    num_classes: int = 10
    in_channels: int = 3
    base_width: int = 16
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.depth < 10 or (self.depth - 4) % 6:
            raise ValueError(f"WideResNetConfig.depth must be 6n+4 with n >= 1, got {self.depth}")
        for name in ("widen_factor", "num_classes", "in_channels", "base_width"):
            if getattr(self, name) < 1:
                raise ValueError(f"WideResNetConfig.{name} must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"WideResNetConfig.dropout must be in [0, 1), got {self.dropout}")


class BasicBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-(dropout)-conv3x3 with an identity or 1x1-conv shortcut."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, dropout: float):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_ch)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu2 = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.project = in_ch != out_ch or stride != 1
        self.shortcut: nn.Module = nn.Identity()
        if self.project:
            self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = self.relu1(self.bn1(x))
        # As in the WRN paper: a projecting shortcut sees the pre-activated input.
        residual = self.shortcut(o) if self.project else x
        y = self.conv1(o)
        y = self.conv2(self.dropout(self.relu2(self.bn2(y))))
        return y + residual


class WideResNet(nn.Module):
    """WRN classifier: `forward(images) -> logits` of shape (B, num_classes)."""

    def __init__(self, cfg: WideResNetConfig):
        super().__init__()
        self.config = cfg
        n = (cfg.depth - 4) // 6
        widths = [cfg.base_width * (2**i) * cfg.widen_factor for i in range(3)]
        self.conv1 = nn.Conv2d(cfg.in_channels, cfg.base_width, 3, padding=1, bias=False)
        blocks = []
        in_ch = cfg.base_width
        for stage, width in enumerate(widths):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(in_ch, width, stride, cfg.dropout))
                in_ch = width
        self.blocks = nn.ModuleList(blocks)
        self.bn = nn.BatchNorm2d(in_ch)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, cfg.num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        for block in self.blocks:
            x = block(x)
        x = self.pool(self.relu(self.bn(x)))
        return self.fc(torch.flatten(x, 1))
