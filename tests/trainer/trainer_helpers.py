"""Small models, data and hooks shared by the trainer tests (and the multi-process script)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

import trainer


class Block(nn.Module):
    """Linear, LayerNorm, GELU, Dropout, added back to the input."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU(), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def residual_mlp(n_in: int, width: int, n_out: int, *, blocks: int = 1, dropout: float = 0.0) -> nn.Sequential:
    layers = [
        nn.Linear(n_in, width),
        *(Block(width, dropout) for _ in range(blocks)),
        nn.Linear(width, n_out),
    ]
    return nn.Sequential(*layers)


def blobs(n: int, *, features: int = 8, classes: int = 3, seed: int = 0) -> trainer.TensorData:
    """Gaussian clusters, one per class: learnable in a few epochs.

    The clusters' centers are the same for every ``seed`` (only the rows drawn around them differ), so
    ``blobs(n, seed=1)`` is a validation set of the distribution ``blobs(m)`` trains on.
    """
    centers = torch.randn(classes, features, generator=torch.Generator().manual_seed(0)) * 2
    generator = torch.Generator().manual_seed(seed + 1)
    y = torch.randint(0, classes, (n,), generator=generator)
    x = centers[y] + torch.randn(n, features, generator=generator)
    return trainer.TensorData(x, y)


class InfGradientAt:
    """A gradient hook that turns one parameter's gradient to inf at the given backward calls."""

    def __init__(self, *calls: int) -> None:
        self.calls, self.count = set(calls), 0

    def __call__(self, grad: Tensor) -> Tensor:
        self.count += 1
        return grad * float("inf") if self.count in self.calls else grad


class StopAt:
    """A hook that asks to stop at ``epoch`` and records every call."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.calls: list[int] = []

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        self.calls.append(epoch)
        return epoch >= self.epoch


class ListSink:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.logged.append((step, dict(metrics)))


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return all(torch.equal(p, q) for p, q in pairs)


def fit_blobs(config: trainer.TrainConfig, model: nn.Module | None = None, **kwargs) -> trainer.FitResult:
    """``trainer.fit`` of a small residual MLP (or ``model``) on 128 rows of blobs, validated on 64."""
    model = residual_mlp(8, 16, 3) if model is None else model
    return trainer.fit(model, blobs(128), blobs(64, seed=1), trainer.Classification(3), config, **kwargs)
