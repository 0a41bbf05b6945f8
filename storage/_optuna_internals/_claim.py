"""A claim's write, fenced by the study lock: it commits with the lock's transaction or not at all.

Optuna creates a trial on a connection of its own, which a worker that froze inside the study
lock would still use after the server had ended its lock transaction and other workers had
claimed the last trials: one trial over the budget. Made on the lock's connection, the same write
fails with that connection instead. The statements are the ones Optuna's ``RDBStorage`` runs
(``_create_new_trial`` and ``set_trial_state_values(RUNNING)``), and the trial they leave is the
one it would: numbered by the study's earlier trials, started now by this node's clock, stored as
naive UTC as Optuna 5 stores it (its models convert to local time when read).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy
from sqlalchemy.engine import Connection

# Optuna serialises trial creation on the study's row (``find_or_raise_by_id(..., for_update=True)``);
# taking the same row lock keeps numbers unique against a creator that is not behind our lock.
_LOCK_STUDY = sqlalchemy.text("SELECT study_id FROM studies WHERE study_id = :sid FOR UPDATE")
# Optuna numbers a new trial by counting the study's trials before it; creators take the study's row
# lock and never delete a trial, so the numbers are 0, 1, 2, ... and the count is the highest + 1:
# one step down ``ix_trials_study_id_number`` (``_indexes``), where a count reads the whole study.
_CREATE = sqlalchemy.text(
    "INSERT INTO trials (number, study_id, state, datetime_start) "
    "VALUES ((SELECT COALESCE(max(number) + 1, 0) FROM trials WHERE study_id = :sid), :sid, 'RUNNING', :now) "
    "RETURNING trial_id"
)
_POP = sqlalchemy.text(
    "UPDATE trials SET state = 'RUNNING', datetime_start = :now WHERE state = 'WAITING' AND trial_id = "
    "(SELECT min(trial_id) FROM trials WHERE study_id = :sid AND state = 'WAITING') RETURNING trial_id"
)
_POP_RETRY = sqlalchemy.text(
    "UPDATE trials SET state = 'RUNNING', datetime_start = :now WHERE state = 'WAITING' AND trial_id = "
    "(SELECT min(t.trial_id) FROM trials t JOIN trial_system_attributes a ON a.trial_id = t.trial_id "
    "AND a.key = 'failed_trial' WHERE t.study_id = :sid AND t.state = 'WAITING') RETURNING trial_id"
)


def _utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def create_running_trial(conn: Connection, study_id: int) -> int:
    """Insert a new RUNNING trial of the study in ``conn``'s transaction; its id."""
    conn.execute(_LOCK_STUDY, {"sid": study_id})
    # A statement after the row lock: its snapshot sees every trial committed before the lock was ours.
    return int(conn.execute(_CREATE, {"sid": study_id, "now": _utc_now()}).scalar_one())


def pop_waiting_trial(conn: Connection, study_id: int, retries_only: bool = False) -> int | None:
    """Turn the study's oldest WAITING trial (a queued retry, or with ``retries_only`` false a queued
    new trial too: a grid point, an ``--enqueue``'d one) RUNNING in ``conn``'s transaction; its id."""
    trial_id = conn.execute(_POP_RETRY if retries_only else _POP, {"sid": study_id, "now": _utc_now()}).scalar()
    return None if trial_id is None else int(trial_id)


# A study attribute counting up, read and written in one statement on the lock's connection: a lock
# holder that needed a second connection could wait for ever behind PgBouncer's pool, all of whose
# server connections other workers hold while they wait for the lock.
_COUNT_UP = sqlalchemy.text(
    "INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (:sid, :key, '1') "
    "ON CONFLICT (study_id, key) DO UPDATE SET value_json = (study_user_attributes.value_json::bigint + 1)::text "
    "RETURNING value_json"
)


def count_up_study_attr(conn: Connection, study_id: int, key: str) -> int:
    """Add one to the study's integer user attribute ``key`` (0 when unset) in ``conn``'s
    transaction; the value it had."""
    return int(conn.execute(_COUNT_UP, {"sid": study_id, "key": key}).scalar_one()) - 1
