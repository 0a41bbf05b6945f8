"""Counting a study whose trials pause and resume (freeze-thaw): a paused attempt resumed since is
not a pruned trial, counted once however many attempts continue its resumption."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

import storage


def _add(study: optuna.Study, state: TrialState, user: dict, system: dict, value: float | None = None) -> None:
    x = optuna.distributions.FloatDistribution(0, 1)
    trial = optuna.trial.create_trial(state=state, value=value, params={"x": 0.5}, distributions={"x": x},
                                      intermediate_values={1: 1.5}, user_attrs=user, system_attrs=system)  # fmt: skip
    study.add_trial(trial)


def test_a_retried_resumption_counts_its_paused_trial_resumed_once(url: str) -> None:
    study = optuna.create_study(storage=optuna.storages.RDBStorage(url))
    _add(study, TrialState.PRUNED, {"paused_at": 1}, {})  # trial 0 pauses at epoch 1
    # Its resumption (trial 1) dies with its worker; the retry (trial 2) inherits resumed_from and pauses at 2.
    _add(study, TrialState.FAIL, {"resumed_from": 0}, {"failed_trial": 0, "retry_history": [0]})
    _add(study, TrialState.PRUNED, {"resumed_from": 0, "paused_at": 2}, {"failed_trial": 0, "retry_history": [0, 1]})
    _add(study, TrialState.COMPLETE, {}, {}, value=1.0)  # trial 3, another logical trial
    counts = storage.count_trials(study._storage._backend.engine, study._study_id)
    assert (counts.logical, counts.finished_logical, counts.state("COMPLETE")) == (2, 2, 1)
    assert (counts.pruned, counts.paused, counts.failed) == (1, 1, 0)
