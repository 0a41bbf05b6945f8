"""What `search trials`, `best`, `status` and `start` show of k-fold trials (``--study-option folds=K``):
the folds each trial finished, their values and spread, a running trial's folds, not epochs."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from search.observation._follow import finished_line
from search.observation._progress import RunningTrial, trial_line
from search.observation._trials import trial_row


def _trial(state: TrialState, folds: dict[int, float], epochs: dict[int, int], **attrs: Any) -> Any:
    """A k-fold trial as a worker leaves it: each finished fold's attributes and its value at step = fold."""
    fold_attrs = {f"fold_{k}_epochs": n for k, n in epochs.items()}
    fold_attrs |= {f"fold_{k}_val_loss": v for k, v in folds.items()} | {f"fold_{k}_final_metrics": {} for k in epochs}
    value = sum(folds.values()) / len(folds) if state == TrialState.COMPLETE else None
    return optuna.trial.create_trial(state=state, value=value, params={}, distributions={},
                                     user_attrs=fold_attrs | attrs, intermediate_values=folds)  # fmt: skip


def test_a_kfold_rows_folds_are_its_fold_values_and_a_running_ones_epochs_its_finished_folds() -> None:
    done = trial_row(_trial(TrialState.COMPLETE, {0: 0.5, 1: 0.7, 2: 0.6}, {0: 4, 1: 3, 2: 4}, epochs_run=11))
    assert done.folds == [0.5, 0.7, 0.6] and done.epochs == 11
    # Fold 1's attributes are written, its value not reported yet: it is not finished.
    running = trial_row(_trial(TrialState.RUNNING, {0: 0.5}, {0: 4, 1: 3}))
    assert running.folds == [0.5] and running.epochs == 7
    one_split = trial_row(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.4,
                                                    intermediate_values={0: 0.6, 1: 0.4}))  # fmt: skip
    assert one_split.folds is None


def test_trials_table_has_a_folds_column_with_their_spread_only_in_a_kfold_study() -> None:
    from search.cli._data import _table

    rows = [trial_row(_trial(TrialState.COMPLETE, {0: 0.5, 1: 0.7, 2: 0.6}, {0: 4, 1: 4, 2: 4}, epochs_run=12)),
            trial_row(_trial(TrialState.PRUNED, {0: 0.9}, {0: 4}, epochs_run=4))]  # fmt: skip
    header, complete, pruned = _table(rows, folds=3)
    assert header.split()[3] == "folds" and complete.split()[3:5] == ["3/3", "±0.1"] and pruned.split()[3] == "1/3"
    assert "folds" not in _table(rows)[0]


def test_finished_and_running_lines_count_folds() -> None:
    complete = trial_row(_trial(TrialState.COMPLETE, {0: 0.5, 1: 0.7}, {0: 4, 1: 4}, epochs_run=8))
    assert finished_line(complete).startswith("trial -1 COMPLETE 0.6 (mean of 2 folds) after 8 epochs in ")
    pruned = trial_row(_trial(TrialState.PRUNED, {0: 0.9, 1: 0.8}, {0: 4, 1: 2}, epochs_run=6))
    assert finished_line(pruned).startswith("trial -1 PRUNED after 2 folds (6 epochs) in ")
    running = RunningTrial(7, "w:1:0", "w", 2, 5.0)
    assert trial_line(running, 10, folds=5) == "trial 7 on w (w:1:0), 2/5 folds done, running 5s"
    assert trial_line(running, 10) == "trial 7 on w (w:1:0), epoch 2/10, running 5s"


def test_start_header_says_when_wilcoxon_cannot_prune_with_so_few_folds() -> None:
    from search.observation._summary import _fold_pruning

    assert "with 3 folds it never prunes" in _fold_pruning("wilcoxon", 3)
    assert _fold_pruning("wilcoxon", 5) == ""  # p < 0.1 can prune after the fourth fold
    assert _fold_pruning("wilcoxon:p=0.3", 3) == "" and _fold_pruning("none", 3) == ""
