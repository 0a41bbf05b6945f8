"""The pruning hook stores a running trial's values in batches: never one a checkpoint holds later
than that checkpoint, all of them with the tell, and as they end once the interval has passed."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch

import trainer
from search.coordination import Coordinator
from search.execution import _pruning
from search.execution._pruning import PruningHook
from search.settings import SearchSettings, StudyRecord
from storage import StudyTrials, finish_trial

EPOCHS = 6


def _running_trial(tmp_path: Path, pruner: str = "median:startup=0,warmup=0") -> tuple[Coordinator, optuna.Trial]:
    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=EPOCHS,
                         settings=SearchSettings(sampler="random", pruner=pruner))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/batches.db", "batches")
    study, _ = coordinator.create_or_resume(record, 2)
    trial, _ = coordinator.claim(study)
    assert trial is not None
    return coordinator, trial


def _stored(coordinator: Coordinator, trial: optuna.Trial) -> dict[int, float]:
    return coordinator.storage.get_trial(trial._trial_id).intermediate_values


def test_values_wait_for_a_checkpoint_or_the_tell_and_every_one_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(_pruning, "STORE_EVERY_S", 3600.0)
    coordinator, trial = _running_trial(tmp_path)
    hook = PruningHook(trial, "val_loss", StudyTrials(coordinator.storage, trial.study._study_id))
    curve = {epoch: 1.0 / epoch for epoch in range(1, EPOCHS + 1)}
    for epoch in (1, 2):
        assert hook(epoch, {"val_loss": curve[epoch]}) is False
    assert hook.asked == 2 and _stored(coordinator, trial) == {}  # asked at each, stored at none
    hook.checkpoint_saved(3)
    hook(3, {"val_loss": curve[3]})
    assert _stored(coordinator, trial) == {1: curve[1], 2: curve[2], 3: curve[3]}
    for epoch in range(4, EPOCHS + 1):
        hook(epoch, {"val_loss": curve[epoch]})
    assert _stored(coordinator, trial) == {1: curve[1], 2: curve[2], 3: curve[3]}
    assert hook.unstored == {4: curve[4], 5: curve[5], 6: curve[6]}
    assert finish_trial(coordinator.storage, trial._trial_id, optuna.trial.TrialState.PRUNED, None, {},
                        lambda frozen, values: None, hook.unstored) is None  # fmt: skip
    finished = coordinator.storage.get_trial(trial._trial_id)
    assert finished.intermediate_values == curve
    assert finished.value == curve[EPOCHS]  # a pruned trial's value: its last reported one, held back until the tell


def test_past_the_interval_each_epoch_is_stored_as_it_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(_pruning, "STORE_EVERY_S", 0.0)
    coordinator, trial = _running_trial(tmp_path, pruner="none")
    hook = PruningHook(trial, "val_loss", StudyTrials(coordinator.storage, trial.study._study_id))
    for epoch in range(1, 4):
        hook(epoch, {"val_loss": float(epoch)})
        assert sorted(_stored(coordinator, trial)) == list(range(1, epoch + 1))
    assert hook.asked == 0 and hook.unstored == {}


class _Dies:
    """A hook after the pruning hook that kills the run at the end of ``epoch``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, epoch: int, metrics: object) -> bool:
        if epoch == self.epoch:
            raise KeyboardInterrupt  # what a killed worker leaves: nothing more runs
        return False


@pytest.mark.parametrize("checkpoint_every", [0, 3600])
def test_a_run_cut_short_has_stored_every_epoch_its_checkpoints_hold(tmp_path, monkeypatch, checkpoint_every):
    """With a checkpoint every epoch, all the epochs run are stored; with one per hour (only the last
    epoch's is due), none: a retry resumes from the newest checkpoint, so it misses no value."""
    monkeypatch.setattr(_pruning, "STORE_EVERY_S", 3600.0)
    coordinator, trial = _running_trial(tmp_path, pruner="none")
    hook = PruningHook(trial, "val_loss", StudyTrials(coordinator.storage, trial.study._study_id))
    generator = torch.Generator().manual_seed(0)
    data = trainer.TensorData(torch.randn(32, 4, generator=generator), torch.randint(0, 2, (32,), generator=generator))
    config = trainer.TrainConfig(epochs=EPOCHS, batch_size=16, lr=1e-2)
    infra = trainer.Infra(checkpoint_dir=tmp_path / "ckpt", checkpoint_every=checkpoint_every, keep_last=100)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(torch.nn.Linear(4, 2), data, data, trainer.Classification(2), config, infra=infra,
                    hooks=[hook, _Dies(4)])  # fmt: skip
    saved = sorted(int(p.stem.removeprefix("epoch-")) for p in (tmp_path / "ckpt").glob("epoch-*.pt"))
    assert saved == ([1, 2, 3, 4] if checkpoint_every == 0 else [])
    assert sorted(_stored(coordinator, trial)) == saved
