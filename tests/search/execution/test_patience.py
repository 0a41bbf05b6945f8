"""``--patience``: a trial whose metric stops improving ends, complete, with its best epoch's value."""

from __future__ import annotations

from pathlib import Path

import pytest

PLATEAU_STUDY = Path(__file__).resolve().parents[1] / "data" / "plateau_study.py"
CURVE = "1.0/0.5/0.6/0.7/0.4/0.3"


@pytest.mark.parametrize(
    ("patience", "epochs", "value", "stopped"),
    [("2", 4, 0.5, 4), ("3", 6, 0.3, None), ("off", 6, 0.3, None)],
    ids=["stops-after-two-worse-epochs", "improves-in-time", "off"],
)
def test_a_trial_ends_complete_once_its_metric_stops_improving(claimed_sleep_trial, patience, epochs, value,
                                                              stopped):  # fmt: skip
    """The loss is best at epoch 2, worse at 3 and 4, better again at 5: patience 2 ends the trial
    after epoch 4 with epoch 2's value; patience 3 lets it reach epoch 5 and go on to the end."""
    from search.execution._trial import run_trial
    from search.settings import SearchSettings

    ctx, trial = claimed_sleep_trial(SearchSettings(pruner="none", patience=patience), PLATEAU_STUDY, {"curve": CURVE})
    outcome = run_trial(ctx, trial)
    stored = ctx.coordinator.storage.get_trial(trial._trial_id)
    assert outcome.state == "COMPLETE"
    assert outcome.value == pytest.approx(value, rel=1e-5)
    assert stored.user_attrs["epochs_run"] == epochs
    assert stored.user_attrs.get("stopped_epoch") == stopped
    assert sorted(stored.intermediate_values) == list(range(1, epochs + 1))
    from search.cli._data import _table
    from search.observation._trials import trial_row

    header, line = _table([trial_row(stored)])  # `search trials`: a trial that stopped early says so
    row, at = line.split(), header.split().index("epochs")
    assert row[at : at + 2] == [str(epochs), "(stopped)"] if stopped else row[at : at + 2] != [str(epochs), "(stopped)"]
    assert row[at] == str(epochs)


def test_the_pruner_decides_first(claimed_sleep_trial):
    """A trial that the pruner stops at an epoch where patience would also end it is pruned."""
    from search.execution._trial import run_trial
    from search.settings import SearchSettings

    settings = SearchSettings(pruner="median:startup=0,warmup=3", patience="1")  # both at epoch 3
    ctx, trial = claimed_sleep_trial(settings, PLATEAU_STUDY, {"curve": CURVE})
    study = ctx.optuna_study
    import optuna

    for _ in range(3):  # complete trials that were better at every epoch
        study.add_trial(optuna.trial.create_trial(
            params=trial.params, distributions=trial.distributions, value=0.01,
            intermediate_values={e: 0.01 for e in range(1, 7)},
        ))  # fmt: skip
    outcome = run_trial(ctx, trial)
    stored = ctx.coordinator.storage.get_trial(trial._trial_id)
    assert outcome.state == "PRUNED"
    assert "stopped_epoch" not in stored.user_attrs
    assert stored.user_attrs["epochs_run"] == 3


def test_a_retry_counts_the_epochs_its_attempt_reported(tmp_path):
    """The hook reads the trial's reported values, inherited ones included: a retry whose attempt
    was best at epoch 2 and reported 3 stops after epoch 4 with patience 2, not 6."""
    import optuna

    import storage
    from search.execution._pruning import PruningHook

    url = storage.sqlite_url(tmp_path / "optuna.db")
    study = optuna.create_study(storage=url, pruner=optuna.pruners.NopPruner())
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    inherited = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, params={"x": 0.5},
                                          distributions=dist, intermediate_values={1: 1.0, 2: 0.5, 3: 0.6})  # fmt: skip
    study.add_trial(inherited)
    trial = optuna.trial.Trial(study, study.get_trials()[0]._trial_id)
    hook = PruningHook(trial, "val_loss", patience=2)
    assert hook(4, {"val_loss": 0.7}) is True
    assert (hook.stopped_epoch, hook.pruned_epoch) == (4, None)
    maximize = PruningHook(trial, "val_loss", patience=2, maximize=True)  # 1.0 at epoch 1 is the best there
    assert maximize(5, {"val_loss": 0.2}) is True and maximize.stopped_epoch == 5


@pytest.mark.parametrize(
    ("values", "epoch", "maximize", "since"),
    [
        ({1: 3.0, 2: 2.0, 3: 2.5}, 3, False, 1),
        ({1: 3.0, 2: 2.0, 3: 2.0}, 3, False, 1),  # a tie is no improvement
        ({1: 3.0, 2: 2.0, 3: 2.5}, 3, True, 2),
        ({1: 3.0, 2: float("nan"), 3: 2.5}, 3, False, 0),
        ({1: 3.0, 2: 2.0, 3: 2.5, 4: 1.0}, 3, False, 1),  # values after the epoch are not read
        ({}, 1, False, 0),
    ],
)
def test_epochs_since_best(values, epoch, maximize, since):
    from search.execution._pruning import epochs_since_best

    assert epochs_since_best(values, epoch, maximize) == since


@pytest.mark.parametrize(
    ("spec", "epochs", "patience"),
    [("auto", 52, 10), ("auto", 20, 4), ("auto", 3, 2), ("off", 52, 0), ("7", 52, 7), (" AUTO ", 10, 2)],
)
def test_resolve_patience(spec, epochs, patience):
    from search.settings import resolve_patience

    assert resolve_patience(spec, epochs) == patience


def test_a_study_stored_before_patience_existed_keeps_searching_without_it():
    import json

    from search.settings import StudyRecord

    record = StudyRecord("resmlp", "val_loss", "minimize", 20)
    data = json.loads(record.to_json())
    del data["settings"]["patience"]
    assert StudyRecord.from_json(json.dumps(data)).settings.patience == "off"
    assert StudyRecord.from_json(record.to_json()).settings.patience == record.settings.patience
