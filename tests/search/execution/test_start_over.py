"""A retry whose checkpoints the trainer refuses (another precision, group size or sharding) starts over."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import trainer
from search.execution._trial import fit_or_start_over

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "trainer"))
from trainer_helpers import StopAt, blobs, residual_mlp  # noqa: E402


def test_a_refused_checkpoint_means_a_fresh_fit_not_a_failed_trial(tmp_path, caplog):
    def fit(config: trainer.TrainConfig, infra: trainer.Infra, hooks=()) -> trainer.FitResult:
        torch.manual_seed(0)
        return trainer.fit(residual_mlp(8, 16, 3), blobs(96), blobs(32, seed=1), trainer.Classification(3), config,
                           infra=infra, hooks=hooks)  # fmt: skip

    first, infra = trainer.TrainConfig(epochs=3, batch_size=16, lr=1e-3), trainer.Infra(checkpoint_dir=tmp_path)
    assert fit(first, infra, hooks=[StopAt(1)]).epochs_run == 1  # the first attempt, killed after epoch 1
    retry = first.replace(lr=3e-3)  # what another worker resolves the same trial to
    result = fit_or_start_over(fit, retry, infra, "trial 7")
    assert result.resumed_from_epoch == 0 and [h["epoch"] for h in result.history] == [1, 2, 3]
    assert "trial 7 starts over: cannot resume from epoch 1" in caplog.text
    assert trainer.load_checkpoint(tmp_path / "epoch-0003.pt")["config"]["lr"] == 3e-3
    caplog.clear()
    again = fit_or_start_over(fit, retry, infra.replace(keep_last=3), "trial 7")  # a resumable one still resumes
    assert again.resumed_from_epoch == 3 and again.history == [] and "starts over" not in caplog.text
