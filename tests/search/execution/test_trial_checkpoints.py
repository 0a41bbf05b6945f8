"""A trial writes the checkpoints its loss bound needs, and none that would be deleted unread."""

from __future__ import annotations

from pathlib import Path

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
