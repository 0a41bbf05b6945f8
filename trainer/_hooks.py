"""What callers plug into ``fit``: hooks that may stop training and sinks that record metrics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, Protocol, runtime_checkable


@runtime_checkable
class Hook(Protocol):
    """Called on the main process after every validation.

    Return ``True`` to stop training after this epoch. The decision reaches every process,
    so all ranks stop at the same epoch. Pruning and early stopping are both hooks.
    """

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool: ...


@runtime_checkable
class CheckpointListener(Protocol):
    """A hook that is told which epochs the checkpoints hold.

    ``checkpoint_saved(epoch)`` is called on the main process once the checkpoint of ``epoch`` is
    written, just before the hooks see that epoch. A run resumed later starts after the newest
    checkpoint, so a hook that keeps what it records back (to write it in batches) writes it then:
    whatever it had not written when the run was cut short is of epochs the resumed run trains again.
    """

    def checkpoint_saved(self, epoch: int) -> None: ...


@runtime_checkable
class MetricsSink(Protocol):
    """Receives one flat dict of per-epoch metrics on the main process (e.g. an MLflow logger)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...


class EarlyStopping:
    """Stop when ``metric`` has not improved by ``min_delta`` for ``patience`` validations."""

    def __init__(
        self,
        patience: int,
        metric: str = "val_loss",
        mode: Literal["min", "max"] = "min",
        min_delta: float = 0.0,
    ) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = patience
        self.metric = metric
        self.sign = 1.0 if mode == "min" else -1.0
        self.min_delta = min_delta
        self.best = math.inf
        self.bad_epochs = 0

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        value = self.sign * metrics[self.metric]
        if value < self.best - self.min_delta:
            self.best = value
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience
