"""K-fold trials: the mean over folds as the value, Wilcoxon pruning across folds, retries that keep
finished folds, and the pruner a study with folds gets."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from search.exceptions import SearchError
from search.execution._folds import fold_value, summarize

SMALL = {"data": "synthetic", "rows": 240, "features": 6, "classes": 3, "folds": 3, "search_epochs": 2,
         "full_epochs": 2}  # fmt: skip
CONFIG = {"lr": 3e-3, "weight_decay": 1e-4, "width": 64, "depth": 1, "dropout": 0.0, "batch_size": 32,
          "warmup_fraction": 0.0, "grad_accum_steps": 1}  # fmt: skip


def test_a_folds_value_is_its_best_epoch_and_a_resumed_fold_keeps_the_epochs_before_its_checkpoint() -> None:
    fit = SimpleNamespace(history=[{"val_loss": 0.5}, {"val_loss": 0.4}, {"val_loss": 0.45}], best_val_loss=0.4)
    assert fold_value(fit, "val_loss", maximize=False) == 0.4
    resumed = SimpleNamespace(history=[{"val_loss": 0.45}], best_val_loss=0.3)  # its best epoch came before
    assert fold_value(resumed, "val_loss", maximize=False) == 0.3
    accuracy = SimpleNamespace(history=[{"val_accuracy": 0.7}, {"val_accuracy": 0.9}], best_val_loss=math.inf)
    assert fold_value(accuracy, "val_accuracy", maximize=True) == 0.9
    curve = {1: {"epoch": 1, "val_accuracy": 0.95}, 2: {"epoch": 2, "val_accuracy": 0.8}}  # the checkpoint's
    later = SimpleNamespace(history=[{"epoch": 3, "val_accuracy": 0.9}], best_val_loss=math.inf, resumed_curve=curve)
    assert fold_value(later, "val_accuracy", maximize=True) == 0.95  # its best epoch came before the checkpoint


def test_a_folds_best_epoch_is_its_values_epoch_and_the_retrain_stops_at_their_mean_scaled() -> None:
    from search.execution._folds import fold_best_epoch
    from search.tracking._replay import kfold_stop

    fit = SimpleNamespace(history=[{"epoch": 1, "val_loss": 0.5, "val_accuracy": 0.7},
                                   {"epoch": 2, "val_loss": 0.4, "val_accuracy": 0.9},
                                   {"epoch": 3, "val_loss": 0.45, "val_accuracy": 0.8}], best_epoch=2)  # fmt: skip
    assert fold_best_epoch(fit, "val_loss", maximize=False) == 2
    assert fold_best_epoch(SimpleNamespace(history=fit.history[2:], best_epoch=2), "val_loss", maximize=False) == 2
    assert fold_best_epoch(fit, "val_accuracy", maximize=True) == 2
    resumed = SimpleNamespace(history=fit.history[2:], best_epoch=2, resumed_curve=dict(enumerate(fit.history[:2], 1)))
    assert fold_best_epoch(resumed, "val_accuracy", maximize=True) == 2  # from the checkpoint's curve
    # Best at epochs 2, 3 and 4 of 10 searched: the 40-epoch retrain stops at 3 x 40 / 10.
    attrs = {"fold_0_best_epoch": 2, "fold_1_best_epoch": 3, "fold_2_best_epoch": 4, "fold_0_epochs": 10}
    assert kfold_stop(attrs, 10, 40) == (12, 3.0)
    assert kfold_stop({"fold_0_best_epoch": 10}, 10, 5) == (5, 10.0)
    assert kfold_stop({"fold_0_best_epoch": 1}, 40, 10) == (1, 1.0)  # at least one epoch
    assert kfold_stop({"fold_0_epochs": 10}, 10, 40) is None  # recorded before folds had best epochs


def test_the_summary_is_the_mean_its_spread_and_the_mean_of_every_final_metric_all_folds_have() -> None:
    finals = [{"val_loss": 0.5, "val_accuracy": 0.8}, {"val_loss": 0.7, "val_accuracy": 0.6}, {"val_loss": 0.6}]
    summary = summarize("val_loss", [0.2, 0.4, 0.3], finals)
    assert summary["value"] == pytest.approx(0.3) and summary["std"] == pytest.approx(0.1)
    assert summary["final"] == {"val_loss": pytest.approx(0.6)}  # accuracy: not every fold has it


@pytest.mark.parametrize(("p", "first"), [(0.1, 4), (0.3, 2), (0.05, 5)])
def test_wilcoxon_prunes_from_the_fold_its_p_value_allows_and_not_before(p: float, first: int) -> None:
    """Every fold worse than the best trial's: Optuna's test gives p = 2^-n after n folds, so the
    first fold it can prune after is the one the spec describes."""
    import optuna

    from search.settings import parse_pruner

    spec = parse_pruner(f"wilcoxon:p={p}")
    assert spec.first_fold() == first and f"from fold {first} on" in spec.describe()
    study = optuna.create_study(pruner=spec.build(2))
    best = study.ask()
    for k in range(8):
        best.report(0.1 + 0.01 * k, k)
    study.tell(best, 0.135)
    worse = study.ask()
    pruned_after = None
    for k in range(8):
        worse.report(0.5 + 0.02 * k, k)
        if worse.should_prune():
            pruned_after = k + 1
            break
    assert pruned_after == first


def _prepare(settings: Any, options: dict[str, Any] | None = None, explicit: frozenset[str] | None = None) -> Any:
    from search.api import StartOptions, prepare

    opts = StartOptions(study="resmlp", trials=2, settings=settings, study_options=options or SMALL,
                        explicit=explicit)  # fmt: skip
    return prepare(opts)


def test_a_study_with_folds_prunes_with_wilcoxon_unless_told_and_refuses_a_per_epoch_pruner() -> None:
    from search.settings import SearchSettings

    assert _prepare(SearchSettings()).record.settings.pruner == "wilcoxon"
    told = _prepare(SearchSettings(pruner="wilcoxon:p=0.3"), explicit=frozenset({"pruner"}))
    assert told.record.settings.pruner == "wilcoxon:p=0.3"
    assert _prepare(SearchSettings(pruner="none"), explicit=frozenset({"pruner"})).record.settings.pruner == "none"
    # A resumed study's stored pruner comes in the settings, not given: its options stay.
    assert _prepare(SearchSettings(pruner="wilcoxon:p=0.3"), explicit=frozenset()).record.settings.pruner == \
        "wilcoxon:p=0.3"  # fmt: skip
    assert _prepare(SearchSettings()).record.folds == 3
    with pytest.raises(SearchError, match="prunes on per-epoch curves, and with folds=3"):
        _prepare(SearchSettings(pruner="median"), explicit=frozenset({"pruner"}))
    with pytest.raises(SearchError, match="needs a study with folds"):
        _prepare(SearchSettings(pruner="wilcoxon"), {**SMALL, "folds": 1}, explicit=frozenset({"pruner"}))


def _worker(tmp_path: Path, pruner: str, *configs: dict[str, Any]) -> Any:
    """A resmlp study with 3 folds and ``configs`` queued (its budget), embedded stores under
    ``tmp_path``, and a worker's context on it."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    opts = StartOptions(study="resmlp", trials=len(configs), settings=SearchSettings(pruner=pruner, patience="off"),
                        study_options=SMALL, enqueue=configs, explicit=frozenset({"pruner"}))  # fmt: skip
    create_or_resume(loc, prepare(opts), len(configs))
    return connect(loc, "resmlp", "test-worker")


@pytest.fixture
def folds_worker(tmp_path: Path) -> Any:
    """A one-trial study of 3 folds (a small-batch configuration queued) and a worker on it."""
    return _worker(tmp_path, "wilcoxon", CONFIG)


@pytest.mark.slow
def test_a_trial_whose_folds_are_all_worse_than_the_best_trials_is_pruned_after_the_fold_the_test_allows(
    tmp_path: Path,
) -> None:
    """At p < 0.3 two folds worse than the best trial's prune (p = 2^-2): the second trial stops after
    fold 1, its two folds recorded, the third never fitted, and no mean over some folds only."""
    from search.execution._trial import run_trial
    from search.observation import trial_row

    ctx = _worker(tmp_path, "wilcoxon:p=0.3", CONFIG, {**CONFIG, "lr": 1e-4})
    outcomes = []
    for _ in range(2):
        trial, _ = ctx.coordinator.claim(ctx.optuna_study)
        outcomes.append(run_trial(ctx, trial))
    assert [o.state for o in outcomes] == ["COMPLETE", "PRUNED"]
    best, pruned = ctx.optuna_study.get_trials()
    assert len(best.intermediate_values) == 3 and sorted(pruned.intermediate_values) == [0, 1]
    assert all(pruned.intermediate_values[k] > best.intermediate_values[k] for k in (0, 1))
    assert {"fold_0_val_loss", "fold_1_val_loss"} <= set(pruned.user_attrs)
    assert "fold_2_val_loss" not in pruned.user_attrs and "val_loss_fold_mean" not in pruned.user_attrs
    assert trial_row(pruned).folds == [pruned.intermediate_values[0], pruned.intermediate_values[1]]


def test_a_retry_fits_only_the_folds_its_attempt_did_not_finish(folds_worker: Any, monkeypatch: Any) -> None:
    """The worker dies after reporting fold 0; its retry fits folds 1 and 2, and its value is the
    mean of all three, fold 0's as the attempt reported it: no fold counted twice, one trial spent."""
    from optuna.trial import TrialState

    import search.execution._folds as folds
    import trainer
    from search.coordination import fail_and_retry
    from search.execution._trial import run_trial

    ctx = folds_worker
    fitted: list[int] = []
    fit, report = trainer.fit, folds._report

    def counted(model: Any, train: Any, val: Any, *args: Any, **kwargs: Any) -> Any:
        fitted.append(len(val))
        return fit(model, train, val, *args, **kwargs)

    class Died(BaseException):
        """A worker's death: nothing of the trial's own code catches it."""

    def dies_after_fold_0(hook: Any, trial: Any, k: int, value: float, last: bool) -> bool:
        pruned = report(hook, trial, k, value, last)
        if k == 0 and trial.number == 0:
            raise Died
        return pruned

    monkeypatch.setattr(trainer, "fit", counted)
    monkeypatch.setattr(folds, "_report", dies_after_fold_0)
    first, _ = ctx.coordinator.claim(ctx.optuna_study)
    with pytest.raises(Died):
        run_trial(ctx, first)
    assert len(fitted) == 1
    with ctx.coordinator.lock():
        assert fail_and_retry(ctx.coordinator.storage, ctx.optuna_study, first._trial_id, "worker lost") is not None
    retry, _ = ctx.coordinator.claim(ctx.optuna_study)
    assert retry is not None and retry.number == 1
    outcome = run_trial(ctx, retry)
    assert outcome.state == "COMPLETE" and len(fitted) == 3  # folds 1 and 2 only
    done = ctx.coordinator.storage.get_trial(retry._trial_id)
    values = [done.user_attrs[f"fold_{k}_val_loss"] for k in range(3)]
    assert done.intermediate_values == dict(enumerate(values))
    assert done.value == pytest.approx(sum(values) / 3) == done.user_attrs["val_loss_fold_mean"]
    assert done.user_attrs["epochs_run"] == sum(done.user_attrs[f"fold_{k}_epochs"] for k in range(3))
    assert all(1 <= done.user_attrs[f"fold_{k}_best_epoch"] <= SMALL["search_epochs"] for k in range(3))
    states = [t.state for t in ctx.optuna_study.get_trials()]
    assert states == [TrialState.FAIL, TrialState.COMPLETE]
    assert ctx.coordinator.claim(ctx.optuna_study)[0] is None  # the budget of one trial is spent
