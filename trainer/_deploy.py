"""What a trained model costs to deploy: its size, its FLOPs and its inference latency on this device.

    measured = trainer.measure_deployment(model, data.val, batch=64, mixed_precision=config.mixed_precision)
    measured.metrics()   # {"params": ..., "flops_per_sample": ..., "latency_ms": ..., "latency_ms_batch": ...}

Latency is the model's forward alone (no preprocessing, no transfer of the input to the device), in
``eval()`` mode under ``torch.inference_mode()`` and the config's autocast, on the device the model is
on: a few warm-up runs, then the median of timed runs, each ended by a CUDA synchronize on a GPU.
Timed runs stop at ``budget_s`` seconds per batch size (at least ``MIN_RUNS`` are taken), so a large
model costs about ``2 x budget_s`` and a small one far less.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import default_collate
from torch.utils.flop_counter import FlopCounterMode

from trainer._data import TensorData, TrainData, dataset_size
from trainer._sharding import is_sharded

WARMUP_RUNS = 3
"""Untimed forwards before each batch size's timed ones (allocator, kernel selection, caches)."""
MIN_RUNS, MAX_RUNS = 5, 25
"""Timed forwards per batch size: at least the first, at most the second, within ``budget_s``."""


@dataclass(frozen=True)
class Deployment:
    """A model's deployment costs, as :func:`measure_deployment` found them."""

    params: int
    """Elements of every parameter (trainable or not), counted once when shared."""
    flops_per_sample: float | None
    """FLOPs of one forward at batch 1 (``torch.utils.flop_counter``: matmuls, convolutions and
    attention, as model FLOPs are usually counted; elementwise work is not); ``None``: not measured."""
    latency_ms: float | None
    """Median milliseconds of one forward at batch 1 (a single request's latency)."""
    latency_ms_batch: float | None
    """Median milliseconds of one forward at ``batch`` rows, divided by ``batch``: per sample."""
    batch: int
    device: str

    def metrics(self) -> dict[str, float]:
        """The measured values by name (what a search records with a trial's final metrics)."""
        out = {"params": float(self.params), "flops_per_sample": self.flops_per_sample,
               "latency_ms": self.latency_ms, "latency_ms_batch": self.latency_ms_batch}  # fmt: skip
        return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def count_params(model: nn.Module) -> int:
    """Elements of the model's parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def measure_deployment(model: nn.Module, data: TrainData, *, batch: int = 64, mixed_precision: str = "no",
                       budget_s: float = 0.25) -> Deployment:  # fmt: skip
    """Parameters, forward FLOPs per sample and latency per sample at batch 1 and at ``batch`` rows.

    The input rows are ``data``'s first (repeated when it has fewer than ``batch``), moved to the
    device of the model's parameters before timing; ``mixed_precision`` (``TrainConfig``'s) chooses the autocast
    (``bf16``/``fp16``) the forward runs under, as in validation. The model is left in the mode it was
    in. A model sharded over processes (FSDP) is counted but neither timed nor its FLOPs counted: its
    forward is a collective that every process would have to run.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    params = count_params(model)
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    if is_sharded(model) or dataset_size(data) == 0:
        return Deployment(params, None, None, None, batch, str(device))
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), _autocast(device, mixed_precision):
            one = _rows(data, 1, device)
            flops = _forward_flops(model, one)
            latency = _per_sample_ms(model, one, 1, device, budget_s)
            many = _per_sample_ms(model, _rows(data, batch, device), batch, device, budget_s)
    finally:
        model.train(was_training)
    return Deployment(params, flops, latency, many, batch, str(device))


def _autocast(device: torch.device, mixed_precision: str) -> AbstractContextManager[Any]:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _rows(data: TrainData, n: int, device: torch.device) -> Any:
    """The model inputs of ``data``'s first ``n`` rows (its rows repeated when it has fewer)."""
    index = [i % dataset_size(data) for i in range(n)]
    if isinstance(data, TensorData):
        x = data.x[torch.as_tensor(index, device=data.x.device)]
    else:
        x = default_collate([data[i][0] for i in index])
    return _to(x, device)


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, Tensor):
        return x.to(device)
    if isinstance(x, list | tuple):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _forward_flops(model: nn.Module, one: Any) -> float | None:
    with FlopCounterMode(display=False) as counter:
        model(one)
    total = counter.get_total_flops()
    return float(total) if total > 0 else None


def _per_sample_ms(model: nn.Module, x: Any, rows: int, device: torch.device, budget_s: float) -> float:
    """Median wall time of ``model(x)`` in ms, per row; the first ``WARMUP_RUNS`` are not timed."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(WARMUP_RUNS):
        model(x)
    sync()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < MAX_RUNS and (len(times) < MIN_RUNS or time.perf_counter() < deadline):
        started = time.perf_counter()
        model(x)
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000 / rows
