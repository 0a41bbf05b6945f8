"""A study whose first trial hangs for good while its heartbeat goes on (for tests of the stall watchdog).

Options: ``hang`` says where that trial hangs: ``forward`` (the model's training forward never
returns, like a rank stuck in a collective), ``loader`` (the data loader never yields the first
batch, like a deadlocked loader) or ``none``. ``marker`` is the file whose creation picks the
trial that hangs: the first to build its model while it is missing (so retries and later trials,
in any worker process, train). ``val_seconds`` is how long each of the ``val_batches`` validation
batches takes: a validation longer than the stall limit as a whole, never per batch, is legit.
Each epoch trains ``rows`` rows (four) in batches of four, read by ``loader_workers`` DataLoader
processes (none: the loader hangs in the worker process; with some, it hangs in them).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData

_FOREVER = threading.Event()  # never set
_LOADER = {"hangs": False}


@dataclass(frozen=True)
class Params:
    x: float


class Rows(torch.utils.data.Dataset):
    """Training rows read through a DataLoader, which hangs on its first row while told to."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if _LOADER["hangs"]:
            _FOREVER.wait()
        return torch.zeros(1), torch.tensor(0.3)


class StallingModel(nn.Module):
    def __init__(self, x: float, hangs: bool, val_seconds: float) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([x]))
        self.hangs = hangs
        self.val_seconds = val_seconds

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training and self.hangs:
            _FOREVER.wait()
        if not self.training and not torch.is_inference_mode_enabled():  # validation, not the latency timing
            time.sleep(self.val_seconds)
        return self.w.expand(inputs.shape[0]) + 0 * inputs[:, 0]


class StallingStudy:
    name = "stalling"
    metric = "val_loss"
    direction = "minimize"

    def __init__(self, marker: str, hang: str = "forward", val_seconds: float = 0.0, val_batches: int = 1,
                 epochs: int = 1, rows: int = 4, loader_workers: int = 0) -> None:  # fmt: skip
        if hang not in ("forward", "loader", "none"):
            raise ValueError(f"hang must be forward, loader or none, got {hang!r}")
        self.marker, self.hang = marker, hang
        self.val_seconds, self.val_batches = float(val_seconds), int(val_batches)
        self.search_fidelity = self.full_fidelity = Fidelity(epochs=int(epochs))
        self.rows, self.loader_workers = int(rows), int(loader_workers)

    def suggest(self, trial: Any) -> Params:
        return Params(x=trial.suggest_float("x", -1.0, 1.0))

    def load_data(self) -> StudyData:
        val = trainer.TensorData(torch.zeros(4 * self.val_batches, 1), torch.full((4 * self.val_batches,), 0.3))
        return StudyData(train=Rows(self.rows), val=val, test=val, task=trainer.Regression())

    def build_model(self, params: Params, data: StudyData) -> nn.Module:
        hangs = self.hang != "none" and self._first()
        _LOADER["hangs"] = hangs and self.hang == "loader"
        return StallingModel(params.x, hangs and self.hang == "forward", self.val_seconds)

    def _first(self) -> bool:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def train_config(self, params: Params, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4, lr=0.1, max_grad_norm=None)

    def train_infra(self, params: Params, fidelity: Fidelity) -> trainer.Infra:
        # None: the loader hangs in this process, where the test can see it. Loader processes start
        # only for two batches or more each (trainer.make_batches).
        return trainer.Infra(num_workers=self.loader_workers)


def make_study(marker: str, hang: str = "forward", val_seconds: float = 0.0, val_batches: int = 1,
               epochs: int = 1, rows: int = 4, loader_workers: int = 0) -> StallingStudy:  # fmt: skip
    return StallingStudy(marker, hang, val_seconds, val_batches, epochs, rows, loader_workers)
