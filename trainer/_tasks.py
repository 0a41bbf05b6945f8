"""Tasks: the training loss and validation metrics that stay exact across processes.

A task accumulates *sums* (loss sums, counts, a confusion matrix) in a dict of tensors on each
process; the trainer sums the dicts over processes and only then turns them into metrics. Ratios
of sums are exact however the validation rows are sharded; averages of per-process averages are not.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

State = dict[str, Tensor]


@runtime_checkable
class Task(Protocol):
    """Turns model outputs into a training loss and validation metrics."""

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Mean training loss of one batch (a scalar that ``backward`` is called on)."""
        ...

    def new_state(self, device: torch.device) -> State:
        """Zeroed sums for one validation pass on ``device``."""
        ...

    def update(self, state: State, outputs: Tensor, targets: Tensor) -> None:
        """Add one batch to ``state`` in place."""
        ...

    def compute(self, state: State) -> dict[str, float]:
        """Metrics from sums already reduced over processes; ``val_loss`` is always present."""
        ...


def _sums(device: torch.device) -> State:
    # float64: sums over a large validation set stay exact to well below the printed precision.
    return {
        "loss_sum": torch.zeros((), dtype=torch.float64, device=device),
        "count": torch.zeros((), dtype=torch.int64, device=device),
    }


class Classification:
    """Cross-entropy over ``num_classes`` logits; ``val_loss``, ``val_accuracy``, ``val_f1`` (macro).

    Outputs are ``(B, C)`` logits and targets ``(B,)`` class indices. The state keeps a confusion
    matrix of counts (rows: true class, columns: predicted), so macro-F1 is exact across processes;
    read it with :meth:`confusion_matrix` from ``trainer.evaluate(..., return_state=True)``.
    """

    def __init__(self, num_classes: int) -> None:
        if num_classes < 2:
            raise ValueError(f"Classification needs num_classes >= 2, got {num_classes}")
        self.num_classes = num_classes

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs.float(), targets)

    def new_state(self, device: torch.device) -> State:
        state = _sums(device)
        state["confusion"] = torch.zeros(self.num_classes, self.num_classes, dtype=torch.int64, device=device)
        return state

    def update(self, state: State, outputs: Tensor, targets: Tensor) -> None:
        logits = outputs.float()
        state["loss_sum"] += F.cross_entropy(logits, targets, reduction="sum")
        state["count"] += targets.numel()
        pairs = targets.reshape(-1) * self.num_classes + logits.argmax(dim=-1).reshape(-1)
        state["confusion"] += torch.bincount(pairs, minlength=self.num_classes**2).view_as(state["confusion"])

    def compute(self, state: State) -> dict[str, float]:
        confusion = state["confusion"].double()
        true_pos = confusion.diagonal()
        # Per-class F1 = 2TP / (2TP + FP + FN); like scikit-learn, classes that never occur in
        # either targets or predictions are left out of the macro average.
        denominator = confusion.sum(dim=0) + confusion.sum(dim=1)
        present = denominator > 0
        f1 = (2 * true_pos[present] / denominator[present]).mean() if present.any() else torch.tensor(0.0)
        count = max(int(state["count"]), 1)
        return {
            "val_loss": float(state["loss_sum"]) / count,
            "val_accuracy": float(true_pos.sum()) / count,
            "val_f1": float(f1),
        }

    @staticmethod
    def confusion_matrix(state: State) -> Tensor:
        """The ``(C, C)`` int64 confusion matrix of ``state`` on CPU (rows true, columns predicted)."""
        return state["confusion"].detach().cpu()


class LanguageModeling:
    """Next-token cross-entropy; ``val_loss`` (per token) and ``val_perplexity``.

    Outputs are ``(B, T, V)`` logits and targets ``(B, T)`` token ids, already shifted by the
    caller. Targets equal to ``ignore_index`` (padding) count neither in the loss nor in the tokens.
    """

    def __init__(self, ignore_index: int = -100) -> None:
        self.ignore_index = ignore_index

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs.flatten(0, -2).float(), targets.flatten(), ignore_index=self.ignore_index)

    def new_state(self, device: torch.device) -> State:
        return _sums(device)

    def update(self, state: State, outputs: Tensor, targets: Tensor) -> None:
        state["loss_sum"] += F.cross_entropy(
            outputs.flatten(0, -2).float(),
            targets.flatten(),
            ignore_index=self.ignore_index,
            reduction="sum",
        )
        state["count"] += (targets != self.ignore_index).sum()

    def compute(self, state: State) -> dict[str, float]:
        loss = float(state["loss_sum"]) / max(int(state["count"]), 1)
        perplexity = math.exp(loss) if loss < 700 else math.inf  # exp overflows a float past ~709
        return {"val_loss": loss, "val_perplexity": perplexity}


class Regression:
    """Mean squared error; ``val_loss`` (MSE) and ``val_rmse``.

    Outputs of shape ``(B, 1)`` are matched to targets of shape ``(B,)`` (and vice versa) instead of
    being broadcast to ``(B, B)``, a classic silent bug.
    """

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        outputs, targets = _aligned(outputs, targets)
        return F.mse_loss(outputs, targets)

    def new_state(self, device: torch.device) -> State:
        return _sums(device)

    def update(self, state: State, outputs: Tensor, targets: Tensor) -> None:
        outputs, targets = _aligned(outputs, targets)
        state["loss_sum"] += F.mse_loss(outputs, targets, reduction="sum")
        state["count"] += targets.numel()

    def compute(self, state: State) -> dict[str, float]:
        mse = float(state["loss_sum"]) / max(int(state["count"]), 1)
        return {"val_loss": mse, "val_rmse": math.sqrt(mse)}


def _aligned(outputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    outputs, targets = outputs.float(), targets.float()
    if outputs.shape != targets.shape and outputs.numel() == targets.numel():
        outputs = outputs.view_as(targets)
    return outputs, targets
