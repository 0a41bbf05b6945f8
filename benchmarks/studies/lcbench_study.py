"""The LCBench surrogate as a study: real MLP learning curves, simulated training time.

Each trial is one LCBench configuration on one OpenML task (``task``); each epoch sleeps the
surrogate's simulated training time for that epoch times ``time_scale`` and reports the
surrogate's validation cross-entropy as ``val_loss``. Everything still goes through
``trainer.fit`` (checkpoints, resume, the pruning hook, MLflow), so the service's claim path,
sampler and pruner behave as in production. Needs onnxruntime (``pip install -r
benchmarks/requirements.txt``), which the product does not depend on.

Options: ``task`` (an OpenML task id, default 3945), ``time_scale`` (default 0.001: a simulated
minute is 60 ms), ``epochs`` (1..52, default 52).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData


def _load_reader() -> Any:
    """benchmarks/lcbench.py, by path: the benchmarks folder is not a package."""
    path = Path(__file__).resolve().parents[1] / "lcbench.py"
    spec = importlib.util.spec_from_file_location("hpsearch_lcbench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


_reader = _load_reader()
SPACE = _reader.SPACE


@dataclass(frozen=True)
class LCBenchParams:
    batch_size: int
    learning_rate: float
    momentum: float
    weight_decay: float
    num_layers: int
    max_units: int
    max_dropout: float


@cache
def _bench() -> Any:
    return _reader.LCBench()


class CurveModel(nn.Module):
    """Replays one surrogate curve: a training pass sleeps an epoch, evaluation outputs sqrt(loss).

    The epoch counter is a buffer, so it is checkpointed with the weights and a resumed trial
    continues its curve where its checkpoint left it.
    """

    def __init__(self, losses: list[float], seconds: list[float]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.register_buffer("epoch", torch.zeros((), dtype=torch.long))
        self.register_buffer("losses", torch.tensor(losses, dtype=torch.float64))
        self.seconds = seconds

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        n = inputs.shape[0]
        if self.training:  # one batch per epoch
            time.sleep(self.seconds[int(self.epoch)])
            self.epoch += 1
            return self.w.expand(n)
        loss = float(self.losses[max(0, int(self.epoch) - 1)])
        return torch.full((n,), math.sqrt(max(loss, 0.0))) + 0 * self.w  # MSE against 0 is the loss


class LCBenchStudy:
    metric = "val_loss"
    direction = "minimize"

    def __init__(self, task: str = "3945", time_scale: float = 0.001, epochs: int = 52) -> None:
        self.task = str(task)
        self.name = f"lcbench-{self.task}"
        self.time_scale = float(time_scale)
        self.search_fidelity = Fidelity(epochs=int(epochs))
        self.full_fidelity = Fidelity(epochs=int(epochs))

    def suggest(self, trial: Any) -> LCBenchParams:
        values: dict[str, Any] = {}
        for name, p in SPACE.items():
            if p.integer:
                values[name] = trial.suggest_int(name, int(p.low), int(p.high), log=p.log)
            else:
                values[name] = trial.suggest_float(name, p.low, p.high, log=p.log)
        return LCBenchParams(**values)

    def curve(self, params: LCBenchParams) -> tuple[list[float], list[float]]:
        """The surrogate's validation cross-entropy and simulated seconds of each epoch."""
        rows = _bench().query(self.task, asdict(params), range(1, self.search_fidelity.epochs + 1))
        times = [r["time"] for r in rows]
        seconds = [times[0], *(max(0.0, b - a) for a, b in zip(times, times[1:], strict=False))]
        return [r["val_cross_entropy"] for r in rows], seconds

    def load_data(self) -> StudyData:
        rows = trainer.TensorData(torch.zeros(4, 1), torch.zeros(4))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params: LCBenchParams, data: StudyData) -> nn.Module:
        losses, seconds = self.curve(params)
        return CurveModel(losses, [s * self.time_scale for s in seconds])

    def train_config(self, params: LCBenchParams, fidelity: Fidelity) -> trainer.TrainConfig:
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4, lr=1e-3, max_grad_norm=None)

    def train_infra(self, params: LCBenchParams, fidelity: Fidelity) -> trainer.Infra:
        return trainer.Infra(num_workers=0)


def make_study(task: str = "3945", time_scale: float = 0.001, epochs: int = 52) -> LCBenchStudy:
    return LCBenchStudy(task, time_scale, epochs)
