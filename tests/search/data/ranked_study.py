"""A study whose validation loss after epoch ``e`` is ``x + 1/e``: trials rank by their parameter at
every epoch (for freeze-thaw and population-based training: ``lr`` is mutable and changes
nothing). The epoch count is a buffer of the model, so a trial resumed from a
checkpoint goes on along its curve, and one started over would report ``x + 1`` again.

Options: ``epochs`` (search epochs, default 4) and ``sleep`` (seconds per epoch, default 0.2, so
that two workers' trials overlap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData


@dataclass(frozen=True)
class RankedParams:
    x: float
    lr: float


class RankedModel(nn.Module):
    def __init__(self, x: float, sleep: float) -> None:
        super().__init__()
        self.x, self.sleep = x, sleep
        self.w = nn.Parameter(torch.zeros(1))
        self.register_buffer("epoch", torch.zeros((), dtype=torch.long))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:  # one training batch per epoch
            self.epoch += 1
            time.sleep(self.sleep)
            return self.w.expand(inputs.shape[0]) + 0 * inputs[:, 0]
        loss = self.x + 1.0 / self.epoch.clamp(min=1).float()  # the target is 0.3: 0.3 + sqrt(v) errs by v squared
        return (0.3 + torch.sqrt(loss)).expand(inputs.shape[0]) + 0 * self.w + 0 * inputs[:, 0]


class RankedStudy:
    name = "ranked"
    metric = "val_loss"
    direction = "minimize"
    mutable_params = {"lr": "lr"}  # population-based training may change it mid-training

    def __init__(self, epochs: int = 4, sleep: float = 0.2) -> None:
        self.sleep = float(sleep)
        self.search_fidelity = Fidelity(epochs=int(epochs))
        self.full_fidelity = Fidelity(epochs=int(epochs))

    def suggest(self, trial: Any) -> RankedParams:
        return RankedParams(x=trial.suggest_float("x", 0.0, 1.0), lr=trial.suggest_float("lr", 1e-3, 1e-1, log=True))

    def load_data(self) -> StudyData:
        rows = trainer.TensorData(torch.zeros(4, 1), torch.full((4,), 0.3))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: RankedParams, data: StudyData) -> nn.Module:
        return RankedModel(params.x, self.sleep)

    def train_config(self, params: RankedParams, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4, lr=params.lr, max_grad_norm=None)

    def train_infra(self, params: RankedParams, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


def make_study(epochs: int = 4, sleep: float = 0.2) -> RankedStudy:
    return RankedStudy(epochs, sleep)
