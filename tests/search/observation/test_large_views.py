"""`search status` and `search trials --top N` read only what they show: the same choice as a read of every trial.

The study mixes what a choice can get wrong: tied best values (the first in trial order wins), an
infinite value, pruned trials with values, failures that finished out of trial order, running and
queued trials, and a retry that continues an earlier trial.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timedelta

import pytest

import storage
from search.coordination import Coordinator
from search.observation import SortKey, sort_rows, top_value_rows, trial_rows
from search.observation._progress import glance_of

# number: (state, value, seconds from start to finish); None: not finished
TRIALS = [
    ("COMPLETE", 0.5, 40),
    ("FAIL", None, 90),
    ("COMPLETE", 0.2, 50),
    ("PRUNED", 0.1, 20),  # a pruned trial's value ranks in --top, not as the best
    ("FAIL", None, 30),
    ("COMPLETE", 0.2, 60),  # ties trial 2: trial 2 stays the best
    ("COMPLETE", math.inf, 70),
    ("FAIL", None, 80),
    ("RUNNING", None, None),
    ("COMPLETE", 0.9, 55),
    ("PRUNED", None, 25),  # pruned before its first value
]


@pytest.fixture
def mixed(study_url, tmp_path, make_demo):
    import optuna
    from optuna.distributions import FloatDistribution

    demo = make_demo(study_url, tmp_path / "project", trials=0, running=False)
    study = optuna.load_study(study_name=demo.name, storage=demo.url)
    start = datetime.now() - timedelta(minutes=10)
    for number, (state, value, seconds) in enumerate(TRIALS):
        system = {"retry_history": [4]} if number == 9 else {}  # trial 9 retries trial 4
        study.add_trial(optuna.trial.FrozenTrial(
            number=number, state=optuna.trial.TrialState[state], value=value,
            datetime_start=start + timedelta(seconds=number),
            datetime_complete=None if seconds is None else start + timedelta(seconds=seconds),
            params={"lr": 0.01 * (number + 1)}, distributions={"lr": FloatDistribution(1e-3, 1.0)},
            user_attrs={"worker": f"w:{number}", "fail_reason": f"reason {number}"} if state == "FAIL" else {},
            system_attrs=system, intermediate_values={1: 1.0} if value is not None else {}, trial_id=number,
        ))  # fmt: skip
    study.enqueue_trial({"lr": 0.5})
    coordinator = Coordinator(demo.url, demo.name)
    yield coordinator
    coordinator.storage.engine.dispose()


def test_status_reads_the_trials_a_full_read_would_pick(mixed):
    everything = mixed.storage.get_all_trials(mixed.study_id(), deepcopy=False)
    first = min(t.datetime_start.timestamp() for t in everything if t.datetime_start)
    for maximize, since in itertools.product((False, True), (None, first + 45)):  # trial 0 started first
        expected = glance_of(everything, maximize, since, 2)
        got = storage.glance(mixed.storage, mixed.study_id(), maximize, since, 2)
        assert got.best.number == expected.best.number == (6 if maximize else 2)
        assert [t.number for t in got.running] == [t.number for t in expected.running] == [8]
        assert [t.number for t in got.recent_failed] == [t.number for t in expected.recent_failed] == [7, 1]
        assert got.recent_failed[-1].user_attrs["fail_reason"] == "reason 1"
        assert got.window.finished == expected.window.finished == (10 if since is None else 6)
        assert got.window.first_start == pytest.approx(expected.window.first_start, abs=1e-3)
        assert got.window.last_finish == pytest.approx(expected.window.last_finish, abs=1e-3)


def test_top_rows_are_the_full_sort_cut_short(mixed):
    for descending, states, top in itertools.product((False, True), (None, ("PRUNED", "COMPLETE"), ("FAIL",)),
                                                     (1, 2, 4, len(TRIALS) + 2)):  # fmt: skip
        key = SortKey("value", descending)
        full = trial_rows(mixed, states)
        assert _timeless(top_value_rows(mixed, key, top, states)) == _timeless(sort_rows(full, key, top))
    rows = {r.number: r for r in top_value_rows(mixed, key, len(TRIALS) + 2)}
    assert rows[4].retried_as == 9 and rows[9].retry_of == 4


def _timeless(rows: list) -> list:
    """The rows without a running trial's duration (read at a different moment in each)."""
    from dataclasses import replace

    return [replace(r, duration_seconds=None) if r.state == "RUNNING" else r for r in rows]


def test_indexes_exist_and_a_new_trial_is_numbered_after_the_last(mixed):
    import sqlalchemy

    engine = mixed.storage.engine
    storage.ensure_indexes(engine)  # again: nothing to do
    made = {ix["name"] for table in ("trials", "trial_user_attributes", "trial_system_attributes")
            for ix in sqlalchemy.inspect(engine).get_indexes(table)}  # fmt: skip
    assert set(storage.INDEXES) <= made
    if not storage.is_postgres(mixed.url):  # the claim writes on the lock's connection on PostgreSQL only
        return
    with engine.begin() as conn:
        trial_id = storage.create_running_trial(conn, mixed.study_id())
    assert mixed.storage.get_trial(trial_id).number == len(TRIALS) + 1  # after the queued one
