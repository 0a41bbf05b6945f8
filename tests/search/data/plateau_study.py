"""A study whose validation loss follows a fixed curve, whatever the parameters (for ``--patience``).

Option ``curve``: the loss after each epoch, as ``1.0/0.5/0.6``; the study trains as many epochs as
it has values. The epoch count is a buffer of the model, so a trial resumed from a checkpoint goes
on along the curve. Each epoch is one batch of four rows, like ``benchmarks/studies/sleep_study.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData


@dataclass(frozen=True)
class PlateauParams:
    x: float


class PlateauModel(nn.Module):
    def __init__(self, x: float, curve: list[float]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([x]))
        self.register_buffer("epoch", torch.zeros((), dtype=torch.long))
        self.curve = curve

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:  # one training batch per epoch
            self.epoch += 1
            return self.w.expand(inputs.shape[0]) + 0 * inputs[:, 0]
        # The target is 0.3: an output of 0.3 + sqrt(v) has a squared error of v.
        loss = self.curve[min(int(self.epoch), len(self.curve)) - 1]
        return torch.full((inputs.shape[0],), 0.3 + math.sqrt(loss)) + 0 * self.w


class PlateauStudy:
    name = "plateau"
    metric = "val_loss"
    direction = "minimize"

    def __init__(self, curve: str = "1.0/0.5/0.6") -> None:
        self.curve = [float(v) for v in curve.split("/")]
        self.search_fidelity = Fidelity(epochs=len(self.curve))
        self.full_fidelity = Fidelity(epochs=len(self.curve))

    def suggest(self, trial: Any) -> PlateauParams:
        return PlateauParams(x=trial.suggest_float("x", -1.0, 1.0))

    def load_data(self) -> StudyData:
        rows = trainer.TensorData(torch.zeros(4, 1), torch.full((4,), 0.3))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: PlateauParams, data: StudyData) -> nn.Module:
        return PlateauModel(params.x, self.curve)

    def train_config(self, params: PlateauParams, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4, lr=0.1, max_grad_norm=None)

    def train_infra(self, params: PlateauParams, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


def make_study(curve: str = "1.0/0.5/0.6") -> PlateauStudy:
    return PlateauStudy(curve)
