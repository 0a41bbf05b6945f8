"""A study whose data can be read once: ``search start`` validates it, then every worker fails to load it.

This is what a data file deleted (or a shared disk unmounted) between start and the workers
looks like. Option ``marker``: the file whose existence means "already read once".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainer
from studies import DataError, Fidelity, StudyData


@dataclass(frozen=True)
class Params:
    x: float


class VanishingDataStudy:
    name = "vanishing"
    metric = "val_loss"
    direction = "minimize"
    search_fidelity = Fidelity(epochs=1)
    full_fidelity = Fidelity(epochs=1)

    def __init__(self, marker: str) -> None:
        self.marker = Path(marker)

    def suggest(self, trial: Any) -> Params:
        return Params(x=trial.suggest_float("x", -1.0, 1.0))

    def load_data(self) -> StudyData:
        if self.marker.exists():
            raise DataError(f"data file {self.marker} is gone")
        self.marker.write_text("read once\n")
        rows = trainer.TensorData(torch.zeros(4, 1), torch.zeros(4))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: Params, data: StudyData) -> nn.Module:
        return nn.Linear(1, 1)

    def train_config(self, params: Params, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4)

    def train_infra(self, params: Params, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


def make_study(marker: str) -> VanishingDataStudy:
    return VanishingDataStudy(marker)
