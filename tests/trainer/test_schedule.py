"""Gradient accumulation and the learning-rate schedule."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from trainer_helpers import blobs, residual_mlp, same_weights

import trainer
from trainer._optim import lr_factor

TASK = trainer.Classification(3)


@pytest.mark.parametrize("rows", [512, 500, 120])
def test_accumulating_4_x_16_equals_one_batch_of_64(rows: int) -> None:
    # 500 and 120 rows leave a last step of 52 and 56 rows: 4 micro-batches of 13 or 14 rows whose
    # losses are weighted so the step's gradient is the mean over its rows, as one batch's is.
    torch.manual_seed(0)
    plain = residual_mlp(8, 32, 3, blocks=2)  # no dropout: the two runs differ only in how they batch
    accumulated, initial = copy.deepcopy(plain), copy.deepcopy(plain)
    train, val = blobs(rows), blobs(64, seed=1)
    config = trainer.TrainConfig(epochs=3, batch_size=64, lr=3e-3, warmup_fraction=0.2)
    task = trainer.Classification(3)
    one = trainer.fit(plain, train, val, task, config)
    four = trainer.fit(accumulated, train, val, task, config.replace(batch_size=16, grad_accum_steps=4))
    assert one.effective_batch_size == four.effective_batch_size == 64
    for p, q in zip(plain.parameters(), accumulated.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert [h["lr"] for h in one.history] == pytest.approx([h["lr"] for h in four.history])
    assert one.history[-1]["train_loss"] == pytest.approx(four.history[-1]["train_loss"], rel=1e-5)
    assert not same_weights(plain, initial)


def test_lr_warms_up_to_the_peak_once_per_optimizer_step() -> None:
    # 64 rows, micro-batch 16, 4 accumulation steps: exactly one optimizer step per epoch, so the
    # epoch's lr is the schedule at optimizer step epoch-1. Stepping per micro-batch would run 4x ahead.
    epochs, warmup_fraction, peak = 10, 0.3, 0.01
    config = trainer.TrainConfig(
        epochs=epochs, batch_size=16, grad_accum_steps=4, lr=peak, warmup_fraction=warmup_fraction
    )
    result = trainer.fit(residual_mlp(8, 16, 3), blobs(64), blobs(32, seed=1), TASK, config)
    lrs = [h["lr"] for h in result.history]
    warmup = round(warmup_fraction * epochs)
    assert lrs == pytest.approx([peak * lr_factor(s, warmup=warmup, total=epochs) for s in range(epochs)])
    assert max(lrs) == pytest.approx(peak) and lrs.index(max(lrs)) == warmup
    rising, falling = lrs[: warmup + 1], lrs[warmup:]
    assert rising == sorted(rising) and falling == sorted(falling, reverse=True)


def test_lr_factor_shape() -> None:
    factors = [lr_factor(s, warmup=4, total=20) for s in range(20)]
    assert factors[0] == pytest.approx(0.2) and factors[4] == 1.0
    assert all(0 < f <= 1 for f in factors)
    assert factors[-1] < 0.01
    assert lr_factor(0, warmup=0, total=5) == 1.0
    assert math.isclose(lr_factor(12, warmup=4, total=20), 0.5)
