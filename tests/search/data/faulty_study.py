"""A study whose trials go wrong on purpose, chosen by trial number (for tests of trial failures).

Trial 0 trains; trial 1 diverges (its loss becomes infinite) in epoch 2; trial 2 hits a bug in the
study's own ``build_model``; trial 3 runs out of CUDA memory (raised, so it needs no GPU); the
pattern repeats. Each epoch is one batch of four rows, like ``benchmarks/studies/sleep_study.py``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData

MODES = ("ok", "diverge", "bug", "oom")


@dataclass(frozen=True)
class FaultyParams:
    x: float
    mode: str


class FaultyModel(nn.Module):
    def __init__(self, x: float, diverge_at: int | None) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([x]))
        self.diverge_at = diverge_at
        self.epoch = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:  # one training batch per epoch
            self.epoch += 1
        out = self.w.expand(inputs.shape[0]) + 0 * inputs[:, 0]
        if self.diverge_at is not None and self.epoch >= self.diverge_at:
            return out * math.inf
        return out


class FaultyStudy:
    name = "faulty"
    metric = "val_loss"
    direction = "minimize"
    search_fidelity = Fidelity(epochs=3)
    full_fidelity = Fidelity(epochs=3)

    def suggest(self, trial: Any) -> FaultyParams:
        mode = MODES[trial.number % len(MODES)]
        trial.set_user_attr("mode", mode)
        return FaultyParams(x=trial.suggest_float("x", -1.0, 1.0), mode=mode)

    def load_data(self) -> StudyData:
        rows = trainer.TensorData(torch.zeros(4, 1), torch.full((4,), 0.3))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: FaultyParams, data: StudyData) -> nn.Module:
        if params.mode == "bug":
            return nn.Linear(data.info["n_features"], 1)  # this study's data has no such entry
        if params.mode == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.10 GiB total)")
        return FaultyModel(params.x, diverge_at=2 if params.mode == "diverge" else None)

    def train_config(self, params: FaultyParams, fidelity: Fidelity) -> trainer.TrainConfig:
        # one batch per process and epoch: a group of N processes reads 4/N rows each
        batch = max(1, 4 // int(os.environ.get("WORLD_SIZE", "1")))
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=batch, lr=0.1, max_grad_norm=None)

    def train_infra(self, params: FaultyParams, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


study = FaultyStudy()
