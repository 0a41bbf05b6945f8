"""Which running trials have stopped heartbeating, and which dead trials already have a retry.

Straight from Optuna's tables in one round trip each, like :mod:`storage._counts`: every worker
asks about once per grace period, so the question must stay cheap as a study grows.
"""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

_RUNNING = sqlalchemy.text(
    """
    SELECT t.trial_id, t.datetime_start, h.heartbeat
    FROM trials t
    LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
    WHERE t.study_id = :sid AND t.state = 'RUNNING'
    """
).columns(
    sqlalchemy.column("trial_id", sqlalchemy.Integer),
    sqlalchemy.column("datetime_start", sqlalchemy.DateTime),
    sqlalchemy.column("heartbeat", sqlalchemy.DateTime),
)

_RETRY_HISTORIES = sqlalchemy.text(
    """
    SELECT a.trial_id, a.value_json, r.value_json AS reason
    FROM trial_system_attributes a
    JOIN trials t ON t.trial_id = a.trial_id
    LEFT JOIN trial_user_attributes r ON r.trial_id = a.trial_id AND r.key = 'fail_reason'
    WHERE t.study_id = :sid AND a.key = 'retry_history'
    """
)


def stale_trials(bind: Engine | Connection, study_id: int, grace_s: float, orphan_s: float) -> list[int]:
    """Ids of RUNNING trials whose heartbeat is older than ``grace_s`` seconds.

    A trial that never beat (its worker died between creating it and the first heartbeat, or the
    reply to the claim was lost) counts as stale once this process has seen it without a heartbeat
    for more than ``orphan_s`` seconds. Only the database's clock decides: heartbeats are written
    with it, and a trial's start time (the claiming node's clock) is never compared with anything.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return stale_trials(conn, study_id, grace_s, orphan_s)
    db_now = bind.execute(sqlalchemy.select(sqlalchemy.func.now())).scalar_one()
    # Optuna stores naive timestamps; drop the zone PostgreSQL attaches to now() (as Optuna does).
    db_now = db_now.replace(tzinfo=None)
    stale = []
    unbeaten = set()
    for row in bind.execute(_RUNNING, {"sid": study_id}):
        if row.heartbeat is not None:
            if (db_now - row.heartbeat).total_seconds() > grace_s:
                stale.append(int(row.trial_id))
            continue
        key = (study_id, int(row.trial_id))
        unbeaten.add(key)
        if (db_now - _FIRST_SEEN_UNBEATEN.setdefault(key, db_now)).total_seconds() > orphan_s:
            stale.append(int(row.trial_id))
    for key in [k for k in _FIRST_SEEN_UNBEATEN if k[0] == study_id and k not in unbeaten]:
        del _FIRST_SEEN_UNBEATEN[key]  # it beat, or it finished
    return stale


_FIRST_SEEN_UNBEATEN: dict[tuple[int, int], datetime] = {}
"""Database time at which this process first saw each RUNNING, never-heartbeated (study, trial)."""


def retried_trial_numbers(bind: Engine | Connection, study_id: int) -> set[int]:
    """Numbers of the trials that already have a retry (the last entry of each retry's history)."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return retried_trial_numbers(conn, study_id)
    histories = (json.loads(row.value_json) for row in bind.execute(_RETRY_HISTORIES, {"sid": study_id}))
    return {int(history[-1]) for history in histories if history}


def retries_of(bind: Engine | Connection, study_id: int, number: int) -> list[int]:
    """Ids of the retries of trial ``number`` (its retry history ends with it), oldest first, but
    those that stood down (``fail_reason`` "not needed: ..."): ran, running, queued or failed later."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return retries_of(conn, study_id, number)
    rows = bind.execute(_RETRY_HISTORIES, {"sid": study_id}).fetchall()
    live = (row for row in rows if not str(json.loads(row.reason) if row.reason else "").startswith("not needed"))
    return sorted(int(row.trial_id) for row in live if json.loads(row.value_json)[-1:] == [number])
