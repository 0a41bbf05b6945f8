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


@pytest.mark.parametrize(
    ("spec", "stored", "spare"),
    [("auto", "auto", 0.0), ("auto:spare=0.25", "auto:spare=0.25", 0.25), (" 5:SPARE=1 ", "5:spare=1", 1.0),
     ("3", "3", 0.0), ("off", "off", 0.0)],
)  # fmt: skip
def test_patience_spares_a_top_fraction_when_asked(spec, stored, spare):
    from search.settings import parse_patience, patience_spare, resolve_patience

    assert parse_patience(spec) == stored
    assert patience_spare(stored) == spare
    assert resolve_patience(stored, 20) == resolve_patience(stored.partition(":")[0], 20)


@pytest.mark.parametrize("spec", ["auto:spare=0", "auto:spare=1.5", "auto:keep=0.2", "off:spare=0.2", "auto:spare="])
def test_a_bad_spare_is_refused(spec):
    from search.exceptions import SearchError
    from search.settings import parse_patience

    with pytest.raises(SearchError, match="--patience"):
        parse_patience(spec)


@pytest.mark.parametrize(
    ("spare", "own_best", "stops"),
    [(0.0, 0.5, True), (0.5, 0.5, False), (0.5, 0.65, True), (0.25, 0.5, True), (1.0, 0.9, False), (1.0, 0.95, True)],
)
def test_a_stalled_trial_in_contention_goes_on(tmp_path, spare, own_best, stops):
    """Complete trials' bests 0.3, 0.6, 0.7, 0.9 (one of them only as its best epoch, its value
    being its last): with spare 0.5 a stalled trial whose best is 0.5 (in the top half) goes on,
    0.65 (outside it) ends; with spare 0.25 only a trial at least as good as 0.3 would go on."""
    import optuna

    import storage
    from search.execution._pruning import PruningHook

    url = storage.sqlite_url(tmp_path / "optuna.db")
    study = optuna.create_study(storage=url, pruner=optuna.pruners.NopPruner())
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for best, last in [(0.3, 0.3), (0.6, 0.8), (0.7, 0.7), (0.9, 0.9)]:
        study.add_trial(optuna.trial.create_trial(params={"x": 0.1}, distributions=dist, value=last,
                                                  intermediate_values={1: 1.0, 2: best, 3: last}))  # fmt: skip
    state = optuna.trial.TrialState
    study.add_trial(optuna.trial.create_trial(params={"x": 0.1}, distributions=dist, state=state.PRUNED,
                                              intermediate_values={1: 0.01}))  # fmt: skip  # not complete: not counted
    study.add_trial(optuna.trial.create_trial(state=state.RUNNING, params={"x": 0.5}, distributions=dist,
                                              intermediate_values={1: 1.0, 2: own_best}))  # fmt: skip
    trial = optuna.trial.Trial(study, study.get_trials()[-1]._trial_id)
    trials = storage.StudyTrials(optuna.storages.RDBStorage(url), study._study_id)
    hook = PruningHook(trial, "val_loss", trials, patience=2, spare=spare)
    assert hook(3, {"val_loss": own_best + 0.01}) is False  # one epoch without improvement
    assert hook(4, {"val_loss": own_best + 0.02}) is stops
    assert hook.stopped_epoch == (4 if stops else None)
