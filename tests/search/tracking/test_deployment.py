"""What a trial records of its model's deployment costs: all of them when it completes, the free ones
when it was pruned, and never a failed trial for a measurement that failed."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import trainer
from search.tracking import deployment_metrics


class _FitResult:
    """The two fields of ``trainer.FitResult`` the record reads, as a CPU fit leaves them."""

    peak_memory_mb = None
    peak_rss_mb = 812.34


def _val() -> trainer.TensorData:
    return trainer.TensorData(torch.randn(6, 4), torch.zeros(6, dtype=torch.long))


def test_a_complete_trial_is_timed_a_pruned_one_only_counted() -> None:
    model = nn.Linear(4, 3)
    timed = deployment_metrics(model, _val(), _FitResult(), mixed_precision="no", batch=8, timed=True)
    assert set(timed) == {"params", "flops_per_sample", "latency_ms", "latency_ms_batch", "peak_rss_mb"}
    assert timed["params"] == 15 and timed["flops_per_sample"] == 2 * 4 * 3 and timed["peak_rss_mb"] == 812.3
    pruned = deployment_metrics(model, _val(), _FitResult(), mixed_precision="no", batch=8, timed=False)
    assert pruned == {"params": 15, "peak_rss_mb": 812.3}


class _NoEval(nn.Linear):
    """Trains, but its inference forward fails (as one out of memory at the latency batch would)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            raise RuntimeError("no inference here")
        return super().forward(x)


def test_a_failed_measurement_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        got = deployment_metrics(_NoEval(4, 3), _val(), _FitResult(), mixed_precision="no", batch=8, timed=True)
    assert got == {"params": 15, "peak_rss_mb": 812.3}
    assert "could not measure the model's latency: RuntimeError: no inference here" in caplog.text
