"""The ResNet search space: one frozen dataclass and the only function that sees a trial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTHS = (8, 16, 32)
BATCH_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class ResNetParams:
    """Hyperparameters of one ResNet trial."""

    width: int
    """Channels of the stem and the first stage; each later stage doubles them."""
    blocks: int
    """BasicBlocks per stage."""
    augment: float
    """Augmentation strength in [0, 1]: random shifts and Gaussian input noise grow with it."""
    lr: float
    """Peak AdamW learning rate."""
    weight_decay: float
    """AdamW decoupled weight decay."""
    batch_size: int
    """Training batch size."""

    def __post_init__(self) -> None:
        if self.width < 1 or self.blocks < 1:
            raise ValueError(f"width and blocks must be >= 1, got {self.width}, {self.blocks}")
        if not 0 <= self.augment <= 1:
            raise ValueError(f"augment must be in [0, 1], got {self.augment}")


def suggest_params(trial: Any) -> ResNetParams:
    """Sample :class:`ResNetParams` from an ``optuna.Trial`` or ``FixedTrial``."""
    return ResNetParams(
        width=trial.suggest_categorical("width", list(WIDTHS)),
        blocks=trial.suggest_int("blocks", 1, 3),
        augment=trial.suggest_float("augment", 0.0, 1.0),
        lr=trial.suggest_float("lr", 1e-4, 1e-2, log=True),
        weight_decay=trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True),
        batch_size=trial.suggest_categorical("batch_size", list(BATCH_SIZES)),
    )
