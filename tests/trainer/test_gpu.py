"""``fit`` on a CUDA GPU: bf16 and fp16, overflow steps, exact resume, throughput metrics.

Skipped without CUDA (CI has no GPU); run them where one is lent: ``pytest -m gpu``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from trainer_helpers import InfGradientAt, StopAt, blobs, residual_mlp

import trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TASK = trainer.Classification(3)


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_a_fit_learns_in_each_precision_and_reports_its_speed(precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    torch.manual_seed(0)
    model = residual_mlp(8, 64, 3, blocks=2, dropout=0.1)
    config = trainer.TrainConfig(epochs=4, batch_size=64, lr=3e-3, mixed_precision=precision)
    result = trainer.fit(model, blobs(4096), blobs(512, seed=1), TASK, config)
    last = result.history[-1]
    assert last["val_accuracy"] >= 0.9, result.history
    assert next(model.parameters()).device.type == "cuda"
    assert last["peak_memory_mb"] > 0 and last["model_tflops"] > 0
    assert result.peak_memory_mb == max(h["peak_memory_mb"] for h in result.history)
    measured = trainer.measure_deployment(model, blobs(8, seed=2), batch=256, mixed_precision=precision)
    assert measured.device.startswith("cuda") and measured.latency_ms is not None and measured.latency_ms > 0
    assert measured.latency_ms_batch is not None and measured.latency_ms_batch < measured.latency_ms
    assert sum(h["skipped_steps"] for h in result.history) <= (3 if precision == "fp16" else 0)
    if "mfu" in last:  # a GPU in the peak table
        assert 0 < last["mfu"] < 1


def test_fp16_overflow_steps_are_skipped_and_counted() -> None:
    torch.manual_seed(0)
    model = residual_mlp(8, 16, 3)
    model[0].weight.register_hook(InfGradientAt(3, 7))
    config = trainer.TrainConfig(epochs=2, batch_size=16, mixed_precision="fp16")
    result = trainer.fit(model, blobs(96), blobs(32, seed=1), TASK, config)  # 6 steps per epoch
    # The scaler's first steps may also overflow while it finds its scale; the injected ones always do.
    skipped = [h["skipped_steps"] for h in result.history]
    assert all(s >= 1 for s in skipped), skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_resume_on_cuda_ends_with_the_uninterrupted_weights(tmp_path: Path, precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")

    def model() -> nn.Module:
        torch.manual_seed(0)
        return residual_mlp(8, 32, 3, blocks=2, dropout=0.2)  # dropout: the CUDA RNG must be restored

    config = trainer.TrainConfig(epochs=4, batch_size=16, lr=3e-3, mixed_precision=precision)
    uninterrupted = model()
    trainer.fit(uninterrupted, blobs(160), blobs(48, seed=1), TASK, config)
    checkpointed = trainer.Infra(checkpoint_dir=tmp_path)
    trainer.fit(model(), blobs(160), blobs(48, seed=1), TASK, config, infra=checkpointed, hooks=[StopAt(2)])
    resumed = model()
    result = trainer.fit(resumed, blobs(160), blobs(48, seed=1), TASK, config, infra=checkpointed)
    assert result.resumed_from_epoch == 2
    for p, q in zip(resumed.state_dict().values(), uninterrupted.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_channels_last_convolutions_train() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 3),
    )  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (512,), generator=generator)
    x = torch.randn(512, 1, 8, 8, generator=generator) + y.view(-1, 1, 1, 1).float()
    data = trainer.TensorData(x, y)
    config = trainer.TrainConfig(epochs=3, batch_size=64, lr=1e-2)
    result = trainer.fit(model, data, data, TASK, config, infra=trainer.Infra(channels_last=True, cudnn_benchmark=True))
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert math.isfinite(result.history[-1]["val_loss"]) and result.history[-1]["val_accuracy"] > 0.6
