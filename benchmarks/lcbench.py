"""Reader of YAHPO Gym's LCBench surrogate (ONNX) that needs only numpy and onnxruntime.

Why: benchmarks want cheap, realistic learning curves (34 OpenML tasks x 52 epochs) to drive the
samplers and pruners, but `yahpo-gym` pins ConfigSpace 0.6.1 (and numpy<2), which cannot live in the
product's environment. Everything yahpo-gym 1.0.2 does for LCBench outside the ONNX graph is small:

* inputs: `x_cont` (float32, columns `epoch, batch_size, learning_rate, momentum, weight_decay,
  num_layers, max_units, max_dropout`, *raw* values) and `x_cat` (int32, the task's code from
  `encoding.json`). The log transforms (epoch, learning_rate, weight_decay) and min-max scaling sit
  inside the graph, so nothing is normalized here;
* output: one (n, 6) float32 array in the order of `OUTPUTS`, already back-transformed by the graph
  (sigmoid, then a linear or exp rescale), so nothing is rescaled here either.

So `LCBench.query` returns the same numbers as `BenchmarkSet("lcbench").objective_function` (see
`benchmarks/check_lcbench.py`, which compares the two). Data: /work/shared/data/yahpo_lcbench/ORIGIN.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "yahpo_lcbench"
ENV_DIR = "HPSEARCH_LCBENCH_DIR"

# `time` is simulated seconds of training up to that epoch; val_accuracy is in percent (0..100), the
# balanced accuracies are fractions (0..1), cross-entropies are nats. Order = yahpo's `y_names`.
OUTPUTS = (
    "time",
    "val_accuracy",
    "val_cross_entropy",
    "val_balanced_accuracy",
    "test_cross_entropy",
    "test_balanced_accuracy",
)
MIN_EPOCH, MAX_EPOCH = 1, 52

# OpenML task ids, in config_space.json's order (encoding.json also knows "167083", which the space excludes).
TASKS = (
    "3945", "7593", "34539", "126025", "126026", "126029", "146212", "167104", "167149", "167152",
    "167161", "167168", "167181", "167184", "167185", "167190", "167200", "167201", "168329", "168330",
    "168331", "168335", "168868", "168908", "168910", "189354", "189862", "189865", "189866", "189873",
    "189905", "189906", "189908", "189909",
)  # fmt: skip


@dataclass(frozen=True)
class Param:
    """One hyperparameter's domain, as config_space.json states it (what yahpo-gym accepts)."""

    low: float
    high: float
    log: bool = False
    integer: bool = False


# Bounds copied from config_space.json, float noise included: yahpo's ConfigSpace check rejects
# learning_rate=1e-4 because its lower bound is exp(log(1e-4)) = 1.0000000000000009e-4.
# weight_decay is uniform in the space, although the model takes its log internally.
# Order = the x_cont columns after `epoch`.
SPACE: dict[str, Param] = {
    "batch_size": Param(16, 512, log=True, integer=True),
    "learning_rate": Param(0.00010000000000000009, 0.10000000000000002, log=True),
    "momentum": Param(0.1, 0.99),
    "weight_decay": Param(1e-05, 0.1),
    "num_layers": Param(1, 5, integer=True),
    "max_units": Param(64, 1024, log=True, integer=True),
    "max_dropout": Param(0.0, 1.0),
}


class LCBench:
    """The LCBench surrogate, loaded once; `query` is one single-threaded onnxruntime call."""

    TASKS = TASKS
    SPACE = SPACE
    OUTPUTS = OUTPUTS

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        """Load `model.onnx` from `data_dir`, else $HPSEARCH_LCBENCH_DIR, else <repo>/../shared/data/yahpo_lcbench.

        Single-threaded on purpose: a query is ~1 ms, thread start-up would cost more than it saves,
        and benchmark workers run side by side on few cores.
        """
        import onnxruntime as ort  # here, so TASKS/SPACE can be imported without onnxruntime

        self.data_dir = Path(data_dir or os.environ.get(ENV_DIR) or DEFAULT_DIR)
        self._check_space(json.loads((self.data_dir / "config_space.json").read_text()))
        encoding = json.loads((self.data_dir / "encoding.json").read_text())["OpenML_task_id"]
        self._codes: dict[str, int] = {t: int(encoding[t]) for t in TASKS}
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(self.data_dir / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        names = sorted(i.name for i in self._session.get_inputs())
        if names != ["x_cat", "x_cont"]:
            raise ValueError(f"unexpected ONNX inputs {names} in {self.data_dir}")
        self._output = self._session.get_outputs()[0].name

    @staticmethod
    def _check_space(space: dict[str, Any]) -> None:
        """Fail loudly if the data is another version than the one TASKS and SPACE were copied from."""
        hps = {h["name"]: h for h in space["hyperparameters"]}
        if tuple(hps["OpenML_task_id"]["choices"]) != TASKS:
            raise ValueError("config_space.json lists other tasks than lcbench.TASKS")
        for name, p in SPACE.items():
            h = hps[name]
            if (h["lower"], h["upper"], h["log"], h["type"] == "uniform_int") != (p.low, p.high, p.log, p.integer):
                raise ValueError(f"config_space.json disagrees with lcbench.SPACE on {name}: {h}")

    def query(self, task: str, config: Mapping[str, float], epochs: Iterable[int]) -> list[dict[str, float]]:
        """Predicted metrics of `config` on OpenML task `task` after each of `epochs` (1..52), in that order.

        Raises ValueError for what yahpo-gym's ConfigSpace check would reject (unknown task, missing or
        unknown keys, values out of bounds, non-integral integers) instead of yahpo's silent fill-in
        of 0 for a missing hyperparameter.
        """
        code = self._codes.get(str(task))
        if code is None:
            raise ValueError(f"unknown LCBench task {task!r}; expected one of lcbench.TASKS")
        if set(config) != set(SPACE):
            raise ValueError(f"config keys {sorted(config)} != {sorted(SPACE)}")
        for name, p in SPACE.items():
            v = config[name]
            if not p.low <= v <= p.high or (p.integer and v != int(v)):
                raise ValueError(f"{name}={v!r} is outside {p}")
        eps = list(epochs)
        if any(e != int(e) or not MIN_EPOCH <= e <= MAX_EPOCH for e in eps):
            raise ValueError(f"epochs must be integers in {MIN_EPOCH}..{MAX_EPOCH}, got {eps}")
        if not eps:
            return []
        x_cont = np.empty((len(eps), 1 + len(SPACE)), dtype=np.float32)
        x_cont[:, 0] = eps
        x_cont[:, 1:] = [float(config[name]) for name in SPACE]
        x_cat = np.full((len(eps), 1), code, dtype=np.int32)
        out = self._session.run([self._output], {"x_cat": x_cat, "x_cont": x_cont})[0]
        return [dict(zip(OUTPUTS, row, strict=True)) for row in out.tolist()]
