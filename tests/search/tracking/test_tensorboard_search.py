"""``--tensorboard DIR``: every trial of a search as a TensorBoard run, next to its MLflow run."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")


@pytest.mark.slow
def test_every_trial_writes_its_epochs_and_hyperparameters(cli, tmp_path):
    import optuna
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    board = tmp_path / "tb"
    cli("start", "--study", SLEEP_STUDY, "--trials", "3", "--workers", "1", "--study-option", "epoch_seconds=0",
        "--study-option", "epochs=3", "--pruner", "none", "--no-retrain", "--tensorboard", str(board), cwd=tmp_path,
        check=True)  # fmt: skip
    study = optuna.load_study(study_name="sleep", storage=f"sqlite:///{tmp_path / '.search' / 'optuna.db'}")
    assert sorted(p.name for p in (board / "sleep").iterdir()) == [f"trial-{t.number}" for t in study.trials]
    for trial in study.trials:
        events = EventAccumulator(str(board / "sleep" / f"trial-{trial.number}"))
        events.Reload()
        curve = {e.step: e.value for e in events.Scalars("val_loss")}
        assert curve == pytest.approx({int(k): v for k, v in trial.intermediate_values.items()})
        assert events.Scalars("final/val_loss")[0].value == pytest.approx(trial.value)
        start = plugin_data_pb2.HParamsPluginData.FromString(
            events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        ).session_start_info
        assert set(start.hparams) == set(trial.params)
