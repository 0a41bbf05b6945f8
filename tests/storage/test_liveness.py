"""Liveness is decided by the database's clock alone, never by a node's local time or time zone."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

import storage


@pytest.mark.parametrize("skew", [timedelta(hours=-5), timedelta(hours=5)], ids=["clock-ahead", "clock-behind"])
def test_a_trial_that_never_beat_is_stale_after_orphan_seconds_of_database_time(url, skew):
    """The claiming node's clock (written as the trial's naive start time) may be hours off."""
    import optuna
    from optuna.distributions import FloatDistribution

    optuna_storage = storage.open_optuna_storage(url)
    study = optuna.create_study(storage=optuna_storage, study_name=f"skew{int(skew.total_seconds())}")
    template = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, params={"x": 0.0},
                                         distributions={"x": FloatDistribution(-1, 1)})  # fmt: skip
    template.datetime_start = datetime.now() + skew
    trial_id = optuna_storage.create_new_trial(study._study_id, template_trial=template)
    engine = optuna_storage.engine

    assert storage.stale_trials(engine, study._study_id, grace_s=1.0, orphan_s=1.5) == []  # just seen
    time.sleep(0.5)
    assert storage.stale_trials(engine, study._study_id, grace_s=1.0, orphan_s=1.5) == []
    time.sleep(1.5)
    assert storage.stale_trials(engine, study._study_id, grace_s=1.0, orphan_s=1.5) == [trial_id]

    optuna_storage.record_heartbeat(trial_id)  # it beats after all: alive again, by the database's clock
    assert storage.stale_trials(engine, study._study_id, grace_s=1.0, orphan_s=1.5) == []
    engine.dispose()
