"""A training-free study: each epoch sleeps a fixed time, so a trial's length is known exactly.

Used to measure orchestration (claiming, reporting, tracking) apart from training, and to race
many workers over very short trials. Everything still goes through ``trainer.fit``: the model's
forward pass sleeps instead of computing. Options: ``epoch_seconds`` (default 0.1), ``epochs`` (3).
Its loss is trained, so it may stop improving: under the default ``--patience`` a trial of more
than a few epochs can end before its last one (the kill-and-resume tests pass ``--patience off``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData


@dataclass(frozen=True)
class SleepParams:
    x: float
    """Where the single weight starts; the loss is its squared distance from 0.3."""
    lr: float


class SleepModel(nn.Module):
    def __init__(self, x: float, epoch_seconds: float) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([x]))
        self.epoch_seconds = epoch_seconds

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:  # one batch per epoch, so one sleep per epoch
            time.sleep(self.epoch_seconds)
        return self.w.expand(inputs.shape[0]) + 0 * inputs[:, 0]


class SleepStudy:
    name = "sleep"
    metric = "val_loss"
    direction = "minimize"
    mutable_params = {"lr": "lr"}  # population-based training (the soak's `--pruner pbt`) may change it

    def __init__(self, epoch_seconds: float = 0.1, epochs: int = 3) -> None:
        self.epoch_seconds = float(epoch_seconds)
        self.search_fidelity = Fidelity(epochs=int(epochs))
        self.full_fidelity = Fidelity(epochs=int(epochs))

    def suggest(self, trial: Any) -> SleepParams:
        return SleepParams(x=trial.suggest_float("x", -2.0, 2.0), lr=trial.suggest_float("lr", 1e-3, 0.5, log=True))

    def load_data(self) -> StudyData:
        rows = trainer.TensorData(torch.zeros(4, 1), torch.full((4,), 0.3))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: SleepParams, data: StudyData) -> nn.Module:
        return SleepModel(params.x, self.epoch_seconds)

    def train_config(self, params: SleepParams, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(
            epochs=fidelity.epochs, batch_size=per_process_batch(), lr=params.lr, max_grad_norm=None
        )

    def train_infra(self, params: SleepParams, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


def per_process_batch(rows: int = 4) -> int:
    """One batch of the ``rows`` per process and epoch, so one sleep per epoch: a trial group of N
    processes (torchrun's WORLD_SIZE) reads rows/N each, since the trainer refuses an effective
    batch larger than the training rows."""
    return max(1, rows // int(os.environ.get("WORLD_SIZE", "1")))


def make_study(epoch_seconds: float = 0.1, epochs: int = 3) -> SleepStudy:
    return SleepStudy(epoch_seconds, epochs)
