"""The learning-rate range test: where it stops, what it suggests, and that it leaves the model as it was."""

from __future__ import annotations

import math

import pytest
import torch
from test_fit import _digits
from trainer_helpers import residual_mlp, same_weights

import trainer


def test_the_sweep_diverges_and_suggests_a_rate_that_trains_well():
    train, val = _digits()
    torch.manual_seed(0)
    model = residual_mlp(64, 128, 10)
    before = residual_mlp(64, 128, 10)
    before.load_state_dict(model.state_dict())
    config = trainer.TrainConfig(epochs=1, batch_size=64)
    found = trainer.lr_range_test(model, train, trainer.Classification(10), config, steps=150)

    assert same_weights(model, before)  # the test trains a copy of the state, then puts it back
    assert found.stopped.startswith("diverged at lr")  # AdamW at lr ~1 blows up on this problem
    assert len(found.lrs) == len(found.losses) == len(found.raw_losses) < 150
    ratios = [b / a for a, b in zip(found.lrs, found.lrs[1:], strict=False)]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-9)  # exponential
    assert found.low < found.suggested <= found.high
    assert 1e-4 <= found.suggested <= 5e-2
    assert all(math.isfinite(v) for v in found.losses)

    # The suggestion trains: three epochs at it beat three epochs at a rate 100 times higher.
    def accuracy(lr: float) -> float:
        torch.manual_seed(0)
        fitted = residual_mlp(64, 128, 10)
        config = trainer.TrainConfig(epochs=3, batch_size=64, lr=lr)
        return trainer.fit(fitted, train, val, trainer.Classification(10), config).final_metrics["val_accuracy"]

    good = accuracy(found.suggested)
    assert good >= 0.9
    assert good > accuracy(100 * found.suggested)


def test_a_short_range_ends_at_its_end_and_bad_ranges_are_refused():
    train, _ = _digits()
    config = trainer.TrainConfig(epochs=1, batch_size=64)
    task = trainer.Classification(10)
    found = trainer.lr_range_test(residual_mlp(64, 32, 10), train, task, config, start_lr=1e-5, end_lr=1e-3, steps=30)
    assert found.stopped == "end of range" and len(found.lrs) == 30
    assert found.lrs[0] == pytest.approx(1e-5) and found.lrs[-1] == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="start_lr < end_lr"):
        trainer.lr_range_test(residual_mlp(64, 32, 10), train, task, config, start_lr=1.0, end_lr=0.1)
