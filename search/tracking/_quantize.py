"""The champion for its platform: int8 weights by ONNX Runtime's dynamic quantization, measured first.

The exported ONNX file (preprocessing included) is quantized with
``onnxruntime.quantization.quantize_dynamic``: weights of MatMul/Gemm stored as int8, activations
quantized on the fly per batch. The float and the int8 file are then measured the same way: size
on disk, latency per sample at batch 1 on one CPU thread (median of timed runs after a warm-up),
and the study's test metrics on the test split the champion was evaluated on. The int8 file is
kept only when the study's metric is no worse than the float file's by more than a tolerance
(docs/export.md says why ONNX Runtime's quantizer rather than PyTorch's).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search.exceptions import SearchError

log = logging.getLogger(__name__)
DEFAULT_TOLERANCE = 0.05
"""How much worse (relative to the float file's value) the int8 file's test metric may be, unless
``search export --quantize-tolerance`` says otherwise: on resmlp's champions a test loss up to 2.5%
higher came with the same predicted class on every test row (docs/experiments/2026-11-28-quantize.md)."""
WARMUP_RUNS, TIMED_RUNS = 50, 500
SCORE_BATCH = 1024
"""Test rows per run when scoring. An int8 file's outputs depend on it a little: dynamic quantization
scales the activations per input tensor, so a row's output depends on the rows batched with it."""


@dataclass(frozen=True)
class Measurement:
    """One file's size, latency and test metrics."""

    bytes: int
    latency_ms: float
    """Per sample at batch 1, one thread: the median of :data:`TIMED_RUNS` runs after a warm-up."""
    metrics: dict[str, float]
    """The study's test metrics (``test_loss``, ``test_accuracy`` ...) on the test split."""


@dataclass(frozen=True)
class QuantizeReport:
    """The float and int8 files side by side, and whether int8 keeps the study's metric."""

    metric: str
    """The study's metric on the test split (``test_loss``): the one the tolerance applies to."""
    direction: str
    tolerance: float
    float32: Measurement
    int8: Measurement
    rows: int
    """Test rows the metrics were computed on."""

    @property
    def worse_by(self) -> float:
        """How much worse int8's metric is than float's, relative to float's (negative: better)."""
        return relative_worsening(self.float32.metrics[self.metric], self.int8.metrics[self.metric], self.direction)

    @property
    def accepted(self) -> bool:
        return not math.isnan(self.worse_by) and self.worse_by <= self.tolerance

    def table(self) -> list[str]:
        names = [self.metric, *sorted(k for k in self.float32.metrics if k != self.metric)]
        head = f"  {'':8} {'size':>10} {'latency/sample':>15}" + "".join(f" {n:>14}" for n in names)
        lines = [head]
        for label, m in (("float32", self.float32), ("int8", self.int8)):
            values = "".join(f" {m.metrics.get(n, math.nan):>14.4f}" for n in names)
            lines.append(f"  {label:8} {_size(m.bytes):>10} {m.latency_ms * 1000:>12.1f} us{values}")
        return lines

    def verdict(self) -> str:
        f, q = self.float32.metrics[self.metric], self.int8.metrics[self.metric]
        change = "worse" if self.worse_by > 0 else "better"
        return (f"int8 {self.metric} {q:.4f} against float {f:.4f}: {abs(self.worse_by):.2%} {change}, "
                f"tolerance {self.tolerance:.2%}")  # fmt: skip


def relative_worsening(float_value: float, int8_value: float, direction: str) -> float:
    """``(int8 - float) / |float|`` for a metric to minimize, the opposite for one to maximize.

    A float value of 0 leaves nothing to be relative to: any worsening is infinite, none is 0.
    """
    worse = int8_value - float_value if direction == "minimize" else float_value - int8_value
    if math.isnan(worse):
        return math.nan
    if float_value == 0:
        return 0.0 if worse <= 0 else math.inf
    return worse / abs(float_value)


def raw_test_rows(data: Any) -> tuple[Any, Any]:
    """The test split as exported files take it: raw input rows (numpy) and their targets."""
    import numpy as np

    if data.raw_test is not None:
        rows = np.asarray(data.raw_test)
    elif data.preprocess is None and hasattr(data.test, "x"):
        rows = data.test.x.cpu().numpy()  # without preprocessing, model inputs are raw rows
    else:
        raise SearchError("the study's data gives no raw test rows (StudyData.raw_test) to score a quantized file on")
    if len(rows) == 0:
        raise SearchError("the study's test split is empty: nothing to score a quantized file on")
    return rows, data.test.y.cpu()


def quantize_onnx(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic quantization: int8 weights (per tensor), activations quantized per batch."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs on the root logger: a note per activation (their parameters are computed at
    # run time, as dynamic quantization means) and advice to run its pre-processing first, which
    # changed neither size, latency nor metric here (docs/experiments/2026-11-28-quantize.md).
    root = logging.getLogger()
    level = root.level
    if not log.isEnabledFor(logging.DEBUG):
        root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def onnx_session(path: Path) -> Any:
    """An onnxruntime CPU session on one thread: how batch-1 latency is measured."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def measure_onnx(path: Path, rows: Any, targets: Any, task: Any) -> Measurement:
    """Size, batch-1 latency and test metrics of one ONNX file."""
    import numpy as np

    session = onnx_session(path)
    name = session.get_inputs()[0].name

    def run(x: Any) -> Any:
        return session.run(None, {name: x})[0]

    outputs = np.concatenate([run(rows[i : i + SCORE_BATCH]) for i in range(0, len(rows), SCORE_BATCH)])
    return Measurement(path.stat().st_size, batch1_latency_ms(run, rows), score(outputs, targets, task))


def batch1_latency_ms(run: Callable[[Any], Any], rows: Any) -> float:
    """Median wall time of ``run`` on one row, cycling through ``rows``, after a warm-up; in ms."""
    for i in range(WARMUP_RUNS):
        run(rows[i % len(rows)][None])
    times = []
    for i in range(TIMED_RUNS):
        row = rows[i % len(rows)][None]
        started = time.perf_counter()
        run(row)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def score(outputs: Any, targets: Any, task: Any) -> dict[str, float]:
    """The study task's metrics of ``outputs`` against ``targets``, named for the test split."""
    import torch

    state = task.new_state(torch.device("cpu"))
    task.update(state, torch.as_tensor(outputs), targets)
    return {k.replace("val_", "test_", 1): float(v) for k, v in task.compute(state).items()}


def measure_quantized(float_path: Path, int8_path: Path, data: Any, metric: str, direction: str,
                      tolerance: float) -> QuantizeReport:  # fmt: skip
    """Quantize ``float_path`` to ``int8_path`` and measure both on the study's test split."""
    rows, targets = raw_test_rows(data)
    quantize_onnx(float_path, int8_path)
    test_metric = metric.replace("val_", "test_", 1)
    float32 = measure_onnx(float_path, rows, targets, data.task)
    int8 = measure_onnx(int8_path, rows, targets, data.task)
    if test_metric not in float32.metrics:
        raise SearchError(f"the study's metric {metric!r} is not among its task's test metrics "
                          f"({', '.join(sorted(float32.metrics))}): nothing to hold the int8 file to")  # fmt: skip
    return QuantizeReport(test_metric, direction, tolerance, float32, int8, len(rows))


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
