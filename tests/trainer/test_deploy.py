"""``trainer.measure_deployment``: parameters, forward FLOPs and latency of a trained model; the
memory a fit reports."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset
from trainer_helpers import blobs, residual_mlp

import trainer

WIDTH, FEATURES, CLASSES = 32, 8, 3


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return residual_mlp(FEATURES, WIDTH, CLASSES, blocks=2)


def test_counts_params_flops_and_times_batch_1_and_the_batch() -> None:
    model = _mlp().train()
    data = blobs(10, features=FEATURES, classes=CLASSES)  # fewer rows than the batch: they are repeated
    before = model(data.x).detach()
    measured = trainer.measure_deployment(model, data, batch=16, budget_s=0.05)
    assert measured.params == sum(p.numel() for p in model.parameters())
    # Each Linear's matmul: 2 x in x out FLOPs a row; LayerNorm and GELU are not counted.
    linears = FEATURES * WIDTH + 2 * WIDTH * WIDTH + WIDTH * CLASSES
    assert measured.flops_per_sample == 2 * linears
    assert measured.latency_ms is not None and measured.latency_ms > 0
    assert measured.latency_ms_batch is not None and measured.latency_ms_batch > 0
    # A 16-row forward of a model this small costs about what a 1-row one does: far less per row.
    assert measured.latency_ms_batch < measured.latency_ms
    assert (measured.batch, measured.device) == (16, "cpu")
    assert set(measured.metrics()) == {"params", "flops_per_sample", "latency_ms", "latency_ms_batch"}
    assert model.training  # left in the mode it was in, its weights untouched
    assert torch.equal(model(data.x).detach(), before)


def test_shared_weights_count_once() -> None:
    embed = nn.Embedding(20, 6)
    head = nn.Linear(6, 20, bias=False)
    head.weight = embed.weight
    model = nn.Sequential(embed, head)
    assert trainer.count_params(model) == 20 * 6


class _Rows(Dataset):
    """A map-style dataset of (x, y) pairs, not in-memory tensors."""

    def __init__(self, data: trainer.TensorData) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def test_a_dataset_under_bf16_autocast() -> None:
    data = _Rows(blobs(4, features=FEATURES, classes=CLASSES))
    measured = trainer.measure_deployment(_mlp(), data, batch=8, mixed_precision="bf16", budget_s=0.02)
    assert measured.latency_ms_batch is not None and measured.latency_ms_batch > 0
    assert measured.flops_per_sample is not None and measured.flops_per_sample > 0


def test_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch must be >= 1"):
        trainer.measure_deployment(_mlp(), blobs(4, features=FEATURES), batch=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS is read from Linux's /proc")
def test_fit_reports_its_peak_host_memory() -> None:
    train = blobs(64, features=FEATURES, classes=CLASSES)
    val = blobs(32, features=FEATURES, classes=CLASSES, seed=1)
    config = trainer.TrainConfig(epochs=1, batch_size=16)
    result = trainer.fit(_mlp(), train, val, trainer.Classification(CLASSES), config, infra=trainer.Infra(cpu=True))
    assert result.peak_rss_mb is not None and result.peak_rss_mb > 10  # torch alone holds far more
    assert result.peak_memory_mb is None  # GPU memory: CUDA only
