"""Hyperparameters a resume may change (population-based training's perturbations): which changed,
and how a change reaches a loaded optimizer and schedule."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from trainer._config import TrainConfig

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass(frozen=True)
class Mutation:
    """A hyperparameter a run changed when it resumed: epochs after ``epoch`` train with ``new``."""

    epoch: int
    """The resumed checkpoint's epoch, the last one trained with ``old``."""
    field: str
    """``lr``, ``weight_decay`` or ``dropout``; ``dropout:<module name>`` for each module that changed
    when the model's dropout modules do not all share one rate."""
    old: float
    new: float
    source: str | None = None
    """The other run's checkpoint this run started from (``Infra.init_from``), else ``None``."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def dropout_rates(model: nn.Module) -> dict[str, float]:
    """The rate of every dropout module of ``model``, by module name."""
    return {name: float(module.p) for name, module in model.named_modules() if isinstance(module, _DROPOUTS)}


def changed_hyperparameters(
    state: Mapping[str, Any], config: TrainConfig, model: nn.Module
) -> list[tuple[str, Any, Any]]:
    """``(field, checkpoint's value, current value)`` for each ``TrainConfig`` field and dropout rate
    that differs from ``state``'s. Keys the checkpoint predates are not compared; nor are keys of
    older checkpoints that are not ``TrainConfig``'s (the infrastructure they held in ``config``)."""
    saved, current = state["config"], config.to_dict()
    changed = [(k, saved[k], current[k]) for k in current if k in saved and saved[k] != current[k]]
    if "dropout" in state:
        changed += _dropout_changes(state["dropout"], dropout_rates(model))
    return changed


def _dropout_changes(saved: Mapping[str, float], current: Mapping[str, float]) -> list[tuple[str, Any, Any]]:
    changed = [(name, saved[name], rate) for name, rate in current.items() if name in saved and saved[name] != rate]
    if changed and len(set(saved.values())) == 1 and len(set(current.values())) == 1:
        return [("dropout", changed[0][1], changed[0][2])]  # one rate for the whole model
    return [(f"dropout:{name}", old, new) for name, old, new in changed]


def apply_to_optimizer(
    optimizer: torch.optim.Optimizer, scheduler: LambdaLR, config: TrainConfig, fields: set[str]
) -> None:
    """Put ``config``'s lr and weight decay (those in ``fields``) into a loaded optimizer and schedule.

    The schedule multiplies each group's base lr by a factor of the step, so a new lr replaces the
    base and the current rate is the new base times the factor of the step the schedule is at:
    warmup and cosine decay go on from where they were, scaled to the new peak. (A dropout rate
    needs nothing here: the caller's model was built with it and loading weights does not touch it.)
    """
    groups = optimizer.param_groups
    if "lr" in fields:
        scheduler.base_lrs = [config.lr for _ in groups]
        for group, factor in zip(groups, scheduler.lr_lambdas, strict=True):
            group["initial_lr"] = config.lr
            group["lr"] = config.lr * factor(scheduler.last_epoch)
    if "weight_decay" in fields:
        for group in groups:
            group["weight_decay"] = config.weight_decay
