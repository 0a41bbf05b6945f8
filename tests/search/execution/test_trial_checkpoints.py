"""A trial writes the checkpoints its loss bound needs, and none that would be deleted unread; a retry
resumed from one reports the epoch it holds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(("every", "saved"), [(30, []), (0, [1, 2, 3])], ids=["every-30s", "every-epoch"])
def test_a_finished_trial_wrote_only_the_checkpoints_its_bound_asked_for(claimed_sleep_trial, monkeypatch, every,
                                                                         saved):  # fmt: skip
    """Epochs of no time: with a 30 s bound none was due, and the last epoch's, which a trial that
    completes deletes at once, is not written either; with 0 (every epoch) each one is."""
    from search.execution._trial import run_trial
    from search.settings import SearchSettings
    from trainer import _checkpoint

    ctx, trial = claimed_sleep_trial(SearchSettings(pruner="none", checkpoint_every=every))
    written = []
    save = _checkpoint._atomic_save

    def recorded(state, path):
        written.append(int(path.stem.removeprefix("epoch-")))
        save(state, path)

    monkeypatch.setattr(_checkpoint, "_atomic_save", recorded)
    outcome = run_trial(ctx, trial)
    assert (outcome.state, written) == ("COMPLETE", saved)
    assert ctx.coordinator.storage.get_trial(trial._trial_id).user_attrs["epochs_run"] == 3


@pytest.mark.slow
def test_a_finished_study_leaves_no_empty_checkpoint_folder(tmp_path, cli):
    """Each trial's folder goes when it finishes, and the study's once the last is gone."""
    sleep = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py"
    cli("start", "--study", str(sleep), "--trials", "2", "--workers", "1", "--checkpoint-every", "0",
        "--study-option", "epoch_seconds=0", "--no-retrain", cwd=tmp_path, check=True)  # fmt: skip
    root = tmp_path / ".search" / "checkpoints"
    assert root.is_dir() and list(root.iterdir()) == []


@pytest.mark.slow
def test_a_retry_pruned_after_resuming_reports_its_checkpoints_epoch(claimed_sleep_trial, monkeypatch):
    """A worker killed between its checkpoint of epoch 2 and that epoch's report; its retry resumes
    from the checkpoint and is pruned at epoch 3 of 4. The trial's curve still holds epoch 2, read from
    the checkpoint, as a completed retry's does: the pruner and the sampler read the whole curve."""
    from search.execution._pruning import PruningHook
    from search.execution._trial import _fit, run_trial
    from search.settings import SearchSettings

    class Killed(Exception):
        pass

    class KilledBeforeReporting(PruningHook):
        def __call__(self, epoch: int, metrics: Any) -> bool:
            if epoch == 2:  # its checkpoint is written, its report not
                raise Killed
            return super().__call__(epoch, metrics)

    settings = SearchSettings(heartbeat_interval=1, grace_period=2, pruner="none", patience="off", checkpoint_every=0)
    ctx, dead = claimed_sleep_trial(settings, options={"epoch_seconds": 0.0, "epochs": 4})
    run = ctx.tracker.start_child(ctx.experiment_id, ctx.parent_run_id, "dead", "trial", {})
    dead.set_user_attr("mlflow_run_id", run.run_id)
    with pytest.raises(Killed):
        _fit(ctx, dead, run, ctx.checkpoint_root / "sleep" / f"trial-{dead.number}",
             KilledBeforeReporting(dead, "val_loss", ctx.pruner_trials))  # fmt: skip
    assert sorted(ctx.coordinator.storage.get_trial(dead._trial_id).intermediate_values) == [1]
    time.sleep(3.0)
    [reaped] = ctx.coordinator.reap(ctx.optuna_study)
    retry, _ = ctx.coordinator.claim(ctx.optuna_study)
    ask = PruningHook.__call__

    def pruned_at_3(self: PruningHook, epoch: int, metrics: Any) -> bool:  # the pruner's answer, stood in for
        ask(self, epoch, metrics)  # reports the epoch
        if epoch == 3:
            self.pruned_epoch = epoch
        return self.pruned_epoch is not None

    monkeypatch.setattr(PruningHook, "__call__", pruned_at_3)
    outcome = run_trial(ctx, retry)
    finished = ctx.coordinator.storage.get_trial(retry._trial_id)
    assert reaped.number == dead.number and finished.user_attrs["resumed_from_epoch"] == 2
    assert outcome.state == "PRUNED" and finished.state.name == "PRUNED"
    assert sorted(finished.intermediate_values) == [1, 2, 3] and finished.user_attrs["epochs_run"] == 3
