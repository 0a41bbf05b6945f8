"""A residual MLP for tabular classification."""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """``x + Dropout(GELU(LayerNorm(Linear(x))))``: the skip keeps deep stacks trainable."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(width, width),
            nn.LayerNorm(width),
            nn.GELU(),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResMLP(nn.Module):
    """Input projection, ``depth`` residual blocks of ``width`` units, linear head to class logits."""

    def __init__(self, n_features: int, n_classes: int, width: int, depth: int, dropout: float) -> None:
        super().__init__()
        self.input = nn.Linear(n_features, width)
        self.blocks = nn.Sequential(*(ResidualBlock(width, dropout) for _ in range(depth)))
        self.head = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.input(x)))
