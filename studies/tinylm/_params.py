"""The tiny language model's search space: one frozen dataclass and the only function that sees a trial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTHS = (32, 64, 128)
HEADS = (1, 2, 4)
"""Every head count divides every width, so any sampled combination is a valid model."""
CONTEXT_DIVISORS = (4, 2, 1)
"""Searched contexts are the study's window length divided by these."""
MIN_CONTEXT = 4


@dataclass(frozen=True)
class TinyLMParams:
    """Hyperparameters of one tiny-LM trial, plus the study settings the model needs."""

    width: int
    """Model width (``d_model``)."""
    layers: int
    """Transformer blocks."""
    heads: int
    """Attention heads; must divide ``width``."""
    context: int
    """Tokens the model attends over; must divide the study's window length."""
    lr: float
    """Peak AdamW learning rate."""
    warmup_fraction: float
    """Fraction of optimizer steps spent in linear warmup."""
    dropout: float
    """Dropout on embeddings, attention weights and residual branches."""
    tie_weights: bool = True
    """Share the token embedding with the output head (a study setting, not searched)."""
    activation_checkpointing: bool = False
    """Recompute block activations in backward to save memory (a study setting, not searched)."""

    def __post_init__(self) -> None:
        if min(self.width, self.layers, self.heads, self.context) < 1:
            raise ValueError("width, layers, heads and context must all be >= 1")
        if self.width % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide width ({self.width})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def context_choices(window: int) -> list[int]:
    """The contexts searched for data windows of ``window`` tokens (each divides ``window``)."""
    choices = [window // d for d in CONTEXT_DIVISORS if window % d == 0 and window // d >= MIN_CONTEXT]
    return sorted(set(choices)) or [window]


def suggest_params(
    trial: Any, window: int, tie_weights: bool = True, activation_checkpointing: bool = False
) -> TinyLMParams:
    """Sample :class:`TinyLMParams` from an ``optuna.Trial`` or ``FixedTrial``."""
    return TinyLMParams(
        width=trial.suggest_categorical("width", list(WIDTHS)),
        layers=trial.suggest_int("layers", 1, 4),
        heads=trial.suggest_categorical("heads", list(HEADS)),
        context=trial.suggest_categorical("context", context_choices(window)),
        lr=trial.suggest_float("lr", 3e-4, 1e-2, log=True),
        warmup_fraction=trial.suggest_float("warmup_fraction", 0.0, 0.2),
        dropout=trial.suggest_float("dropout", 0.0, 0.2),
        tie_weights=tie_weights,
        activation_checkpointing=activation_checkpointing,
    )
