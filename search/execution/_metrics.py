"""What a finished trial keeps of its training history: speed, memory and its model's final metrics."""

from __future__ import annotations

import math


def speed_attrs(history: list[dict[str, float]]) -> dict[str, float]:
    """The median epoch's model TFLOP/s and MFU, and the most memory any epoch took, where fit
    measured them (MFU and memory on CUDA only)."""
    out: dict[str, float] = {}
    for key, digits in (("model_tflops", 4), ("mfu", 4)):
        values = sorted(h[key] for h in history if key in h)
        if values:
            out[key] = round(values[len(values) // 2], digits)
    memory = [h["peak_memory_mb"] for h in history if "peak_memory_mb" in h]
    if memory:
        out["peak_memory_mb"] = round(max(memory), 1)
    return out


_NOT_MODEL_METRICS = frozenset({
    "epoch", "lr", "grad_norm", "grad_norm_max", "nonfinite_grad_norms", "skipped_steps", "loss_spikes",
    "epoch_seconds", "samples_per_second", "tokens_per_second", "model_tflops", "mfu", "peak_memory_mb",
})  # fmt: skip
"""The trainer's per-epoch diagnostics and speed: the rest (losses, the task's metrics) describe the model."""


def final_metrics(history: list[dict[str, float]]) -> dict[str, float]:
    """The last epoch's model metrics (losses, accuracy, F1, ...), kept on the trial so `search trials`
    can show and sort by them without asking MLflow for each run."""
    last = history[-1] if history else {}
    return {k: float(v) for k, v in last.items() if k not in _NOT_MODEL_METRICS and math.isfinite(v)}


def best_value(history: list[dict[str, float]], metric: str, direction: str) -> float:
    """The trial's value: the best of ``metric`` over the epochs that reported it."""
    values = [h[metric] for h in history if metric in h and math.isfinite(h[metric])]
    if not values:
        raise ValueError(f"the study metric {metric!r} was never reported")
    return min(values) if direction == "minimize" else max(values)
