"""What the views show of a large study, read in SQL: the best trial, the running and recently
failed ones, the finish times' window, the objective of every trial.

``search status`` and ``search trials --top N`` used to read every trial in full (Optuna's
``get_all_trials``): 85 s at 100,000 trials. These read the few trials a view shows, and of the
others only what the choice needs (a value, a state, a time), so a view costs a few small queries
and one narrow column read. Each picks what the same view computed over every trial picks, ties
included (``tests/storage/test_summary.py`` compares them).
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy.engine import Connection

from storage._trials import read_trials

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

# Objective 0 as a float: Optuna stores infinities as a NULL value and a type.
_VALUE = "CASE v.value_type WHEN 'INF_POS' THEN 1 WHEN 'INF_NEG' THEN -1 ELSE 0 END AS inf, v.value"
_VALUES = sqlalchemy.text(
    f"""
    SELECT t.trial_id, t.number, t.state, {_VALUE}
    FROM trials t LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
    WHERE t.study_id = :sid ORDER BY t.trial_id
    """
)
# The best complete trial: infinities first or last, then the value, then the first in trial order.
_BEST = """
    SELECT t.trial_id FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
    WHERE t.study_id = :sid AND t.state = 'COMPLETE'
    ORDER BY CASE v.value_type WHEN 'INF_NEG' THEN {neg} WHEN 'INF_POS' THEN {pos} ELSE 1 END, v.value {order},
             t.trial_id
    LIMIT 1
"""
_BEST_MIN = sqlalchemy.text(_BEST.format(neg=0, pos=2, order="ASC"))
_BEST_MAX = sqlalchemy.text(_BEST.format(neg=2, pos=0, order="DESC"))
_IN_STATE = sqlalchemy.text("SELECT trial_id FROM trials WHERE study_id = :sid AND state = :state ORDER BY trial_id")
_RECENT_FAILED = sqlalchemy.text(
    """
    SELECT trial_id FROM trials WHERE study_id = :sid AND state = 'FAIL' AND datetime_complete IS NOT NULL
    ORDER BY datetime_complete DESC, trial_id DESC LIMIT :k
    """
)
_FIRST_START = sqlalchemy.text("SELECT min(datetime_start) FROM trials WHERE study_id = :sid").columns(
    sqlalchemy.column("first", sqlalchemy.DateTime)
)
_FINISHED_SINCE = sqlalchemy.text(
    "SELECT count(*) AS n, max(datetime_complete) AS last FROM trials WHERE study_id = :sid AND datetime_complete >= :t"
).columns(sqlalchemy.column("n", sqlalchemy.Integer), sqlalchemy.column("last", sqlalchemy.DateTime))
_FAIL_REASONS = sqlalchemy.text(
    """
    SELECT r.value_json FROM trials t
    LEFT JOIN trial_user_attributes r ON r.trial_id = t.trial_id AND r.key = 'fail_reason'
    WHERE t.study_id = :sid AND t.state = 'FAIL' ORDER BY t.trial_id
    """
)
_RETRIES = sqlalchemy.text(
    """
    SELECT t.number, a.value_json FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id
    WHERE t.study_id = :sid AND a.key = 'retry_history' ORDER BY t.trial_id
    """
)


@dataclass(frozen=True)
class FinishWindow:
    """When a study's trials started and finished, as a rate needs it (epoch seconds)."""

    first_start: float | None
    """The earliest start of any trial; None before one starts."""
    finished: int
    """Trials finished at or after ``since`` (or the first start)."""
    last_finish: float | None
    """The latest of those finishes."""


@dataclass(frozen=True)
class StudyGlance:
    """The trials a status line shows: the best complete one, the running ones and the last failures."""

    best: FrozenTrial | None
    running: list[FrozenTrial]
    recent_failed: list[FrozenTrial]
    """The last ``k`` failed trials by finish time, oldest first."""
    window: FinishWindow


def glance(storage: RDBStorage, study_id: int, maximize: bool, since: float | None, k: int) -> StudyGlance:
    """The study as a status line sees it, in a few queries (one transaction)."""
    from storage._optuna_internals import scoped_session

    with scoped_session(storage) as session:
        conn = session.connection()
        best = conn.execute(_BEST_MAX if maximize else _BEST_MIN, {"sid": study_id}).scalar()
        running = [int(r[0]) for r in conn.execute(_IN_STATE, {"sid": study_id, "state": "RUNNING"})]
        failed = [int(r[0]) for r in conn.execute(_RECENT_FAILED, {"sid": study_id, "k": k})][::-1]
        window = finish_window(conn, study_id, since)
        wanted = [*([] if best is None else [int(best)]), *running, *failed]
        read = read_trials(session, wanted) if wanted else {}
    return StudyGlance(None if best is None else read[int(best)], [read[t] for t in running],
                       [read[t] for t in failed], window)  # fmt: skip


def finish_window(conn: Connection, study_id: int, since: float | None) -> FinishWindow:
    first = conn.execute(_FIRST_START, {"sid": study_id}).scalar()
    first_s = None if first is None else _epoch(first)
    start = since if since is not None else first_s
    if start is None:
        return FinishWindow(None, 0, None)
    bound = datetime.datetime.fromtimestamp(start, datetime.UTC).replace(tzinfo=None)  # stored as naive UTC
    row = conn.execute(_FINISHED_SINCE, {"sid": study_id, "t": bound}).one()
    return FinishWindow(first_s, int(row.n), None if row.last is None else _epoch(row.last))


def _epoch(stored: datetime.datetime) -> float:
    return stored.replace(tzinfo=datetime.UTC).timestamp()


def trial_objectives(conn: Connection, study_id: int) -> list[tuple[int, int, str, float | None]]:
    """Every trial's id, number, state and objective value (None without one), in trial order."""
    out = []
    for tid, number, state, inf, value in conn.execute(_VALUES, {"sid": study_id}):
        if inf:
            value = math.inf * inf
        out.append((int(tid), int(number), str(getattr(state, "name", state)), None if value is None else float(value)))
    return out


def retried_as(conn: Connection, study_id: int) -> dict[int, int]:
    """For each trial that a later one retries or resumes: the number of the last that does."""
    out = {}
    for number, history in conn.execute(_RETRIES, {"sid": study_id}):
        names = json.loads(history) or []
        if names:
            out[int(names[-1])] = int(number)
    return out


def fail_reasons(conn: Connection, study_id: int) -> list[Any]:
    """Every failed trial's ``fail_reason`` user attribute (None where it has none), in trial order."""
    return [None if raw is None else json.loads(raw) for (raw,) in conn.execute(_FAIL_REASONS, {"sid": study_id})]


def read_some(storage: RDBStorage, trial_ids: list[int]) -> dict[int, FrozenTrial]:
    """Trials by id, read in full (chunks of a few hundred)."""
    from storage._optuna_internals import scoped_session

    found: dict[int, Any] = {}
    with scoped_session(storage) as session:
        for start in range(0, len(trial_ids), 500):
            found.update(read_trials(session, trial_ids[start : start + 500]))
    return found
