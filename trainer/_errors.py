"""Exceptions raised by :mod:`trainer`."""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose."""


class ConfigError(TrainerError, ValueError):
    """A :class:`~trainer.TrainConfig` or :class:`~trainer.Infra` value is invalid or cannot run here.

    The message names the offending setting (and its CLI flag where there is one).
    """


class DivergenceError(TrainerError, FloatingPointError):
    """The training loss became NaN or infinite.

    Attributes:
        epoch: 1-based epoch in which the first non-finite loss was seen.
        step: 0-based batch index within that epoch.
    """

    def __init__(self, epoch: int, step: int, loss: float) -> None:
        self.epoch = epoch
        self.step = step
        self.loss = loss
        super().__init__(f"diverged at epoch {epoch}, step {step}: training loss is {loss}")


class CheckpointError(TrainerError):
    """A checkpoint file is missing, truncated or does not match the model."""
