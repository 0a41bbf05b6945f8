"""A model's deployment metrics, recorded with its final metrics: what it costs to run.

The trainer measures (``trainer.measure_deployment`` on the study's validation rows, at the end of
the trial, on the trial's device and precision); the trial records the numbers in its
``final_metrics`` and its MLflow run. A complete trial gets all of them; a pruned one only those
that cost nothing (``params`` and memory): no sampler ranks a pruned trial, and timing its model
would add a fraction of a second to every pruned trial. The retrain measures its full-scale model
the same way and records the numbers on the registered model version (``hpsearch.`` tags).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

LATENCY_BUDGET_S = 0.1
"""Seconds of timed forwards per batch size (after a few warm-up runs; at least 5 are timed)."""

DEPLOYMENT_METRICS = ("params", "flops_per_sample", "latency_ms", "latency_ms_batch", "peak_memory_mb", "peak_rss_mb")
"""Their names, as ``--sort``, the report and MLflow show them."""


def deployment_metrics(model: Any, val: Any, result: Any, *, mixed_precision: str, batch: int,
                       timed: bool) -> dict[str, float]:  # fmt: skip
    """``params`` and, with ``timed``, ``flops_per_sample``, ``latency_ms`` (batch 1, per sample) and
    ``latency_ms_batch`` (``batch`` rows, per sample) of ``model`` on ``val``'s first rows; the fit's
    ``peak_memory_mb`` (CUDA) and ``peak_rss_mb`` (the process's peak resident memory) from ``result``.

    A measurement that fails (out of memory at ``batch`` rows, a model whose forward cannot run
    alone) is logged and left out: it never fails a trial that trained.
    """
    import trainer

    out: dict[str, float] = {"params": float(trainer.count_params(model))}
    if timed:
        try:
            measured = trainer.measure_deployment(model, val, batch=batch, mixed_precision=mixed_precision,
                                                  budget_s=LATENCY_BUDGET_S)  # fmt: skip
            out |= measured.metrics()
        except Exception as exc:  # noqa: BLE001 - a trained model's record must not be lost to its timing
            log.warning("could not measure the model's latency: %s", f"{type(exc).__name__}: {exc}"[:300])
    for key in ("peak_memory_mb", "peak_rss_mb"):
        value = getattr(result, key, None)
        if value is not None:
            out[key] = round(float(value), 1)
    return out


def missed_at_full_scale(constraints: Any, measured: dict[str, float]) -> list[str]:
    """The ``--constraint``s on a deployment metric that the retrained model, measured again at full
    scale, misses (``latency_ms 0.21 misses latency_ms<=0.12``); one on another metric (a validation
    metric, which the retrain reports as a test metric) is left to the search's trials."""
    return [
        f"{c.metric} {measured[c.metric]:.6g} misses {c.label}"
        for c in constraints
        if c.metric in DEPLOYMENT_METRICS and c.metric in measured and c.value(measured[c.metric]) > 0
    ]
