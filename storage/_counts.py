"""Counting a study's trials in one round trip, straight from Optuna's tables.

Claiming a trial happens under a study-wide lock, so the count must be cheap: loading every
trial through Optuna's API would cost O(trials) per claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

# Physical trials by state; on an extra row whose state is NULL (a study with no trials has no other
# row): how many are retries (and queued retries: the other queued trials are new ones, unstarted), paused
# attempts and evicted ones, one study user attribute (``:key``, none when NULL)
# and the paused attempts resumed since. Those are counted by the attempts that resumptions name in
# ``resumed_from``, each once: the retry of a resumption whose worker died names it too. Each part is
# an index's range (``storage._optuna_internals.INDEXES``): the study's trials by state, and the few
# attributes of one key, not a join of every trial with every attribute.
_COUNTS = sqlalchemy.text(
    """
    SELECT NULL AS state, 0 AS n,
           (SELECT count(*) FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id
            WHERE a.key = 'failed_trial' AND t.study_id = :sid) AS retries,
           (SELECT count(*) FROM trial_user_attributes p JOIN trials t ON t.trial_id = p.trial_id
            WHERE p.key = 'paused_at' AND t.study_id = :sid AND t.state = 'PRUNED') AS paused,
           (SELECT count(*) FROM trial_user_attributes e JOIN trials t ON t.trial_id = e.trial_id
            WHERE e.key = 'paused_evicted' AND t.study_id = :sid AND t.state = 'PRUNED') AS evicted,
           (SELECT count(DISTINCT r.value_json) FROM trial_user_attributes r
            JOIN trials rt ON rt.trial_id = r.trial_id WHERE rt.study_id = :sid AND r.key = 'resumed_from') AS resumed,
           (SELECT count(*) FROM trial_system_attributes f JOIN trials w ON w.trial_id = f.trial_id
            WHERE f.key = 'failed_trial' AND w.study_id = :sid AND w.state = 'WAITING') AS waiting_retries,
           (SELECT value_json FROM study_user_attributes WHERE study_id = :sid AND key = :key) AS attr
    UNION ALL
    SELECT state, count(*) AS n, 0 AS retries, 0 AS paused, 0 AS evicted, 0 AS resumed, 0 AS waiting_retries,
           NULL AS attr
    FROM trials WHERE study_id = :sid GROUP BY state
    """
)


# What a claim needs, each part one index's range: however large the study, a few rows read. The trials
# number 0, 1, 2, ... (``storage._optuna_internals._claim``), so the highest number + 1 is their count;
# the rows after the first are the study user attributes asked for (``:keys``) that exist.
_CLAIM_COUNTS = sqlalchemy.text(
    """
    SELECT NULL AS key, NULL AS value_json,
           (SELECT COALESCE(max(number) + 1, 0) FROM trials WHERE study_id = :sid) AS n,
           (SELECT count(*) FROM trials WHERE study_id = :sid AND state = 'RUNNING') AS running,
           (SELECT count(*) FROM trials WHERE study_id = :sid AND state = 'WAITING') AS waiting,
           (SELECT count(*) FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id
            WHERE a.key = 'failed_trial' AND t.study_id = :sid) AS retries,
           (SELECT count(*) FROM trial_system_attributes f JOIN trials w ON w.trial_id = f.trial_id
            WHERE f.key = 'failed_trial' AND w.study_id = :sid AND w.state = 'WAITING') AS waiting_retries
    UNION ALL
    SELECT key, value_json, 0 AS n, 0 AS running, 0 AS waiting, 0 AS retries, 0 AS waiting_retries
    FROM study_user_attributes WHERE study_id = :sid AND key IN :keys
    """
).bindparams(sqlalchemy.bindparam("keys", expanding=True, type_=sqlalchemy.String))
_ATTRS = sqlalchemy.text(
    "SELECT key, value_json FROM study_user_attributes WHERE study_id = :sid AND key IN :keys"
).bindparams(sqlalchemy.bindparam("keys", expanding=True, type_=sqlalchemy.String))
FINISHED = "FINISHED"
"""The one state of a claim's counts for every finished trial (see :func:`claim_counts`)."""


@dataclass(frozen=True)
class TrialCounts:
    """Physical trials by state, plus how many of them are retries of an earlier attempt."""

    by_state: dict[str, int]
    retries: int
    resumed: int = 0
    """Paused attempts resumed since (freeze-thaw): each is continued by one resumption."""
    paused_attempts: int = 0
    """PRUNED attempts that paused, resumed since or not."""
    evicted: int = 0
    """Paused trials whose checkpoints went to keep the paused trials' disk within its bound: pruned."""
    unstarted: int = 0
    """Queued trials that are new logical trials, not retries or continuations (grid points, ``--enqueue``'s
    configurations), none of which has run yet: a search ended early leaves them queued for the next run."""

    def state(self, name: str) -> int:
        return self.by_state.get(name, 0)

    @property
    def pruned(self) -> int:
        """Logical trials that ended pruned (or paused, never resumed): not the paused attempts resumed since."""
        return self.state("PRUNED") - self.resumed

    @property
    def paused(self) -> int:
        """Paused trials that no attempt continues (yet): they end as they are if none resumes them."""
        # A study's one pruner either pauses (every resumption continues a paused attempt) or not.
        return self.paused_attempts - self.resumed if self.paused_attempts else 0

    @property
    def failed(self) -> int:
        """Logical trials that ended failed (their retries spent, or none allowed)."""
        return self.finished_logical - self.state("COMPLETE") - self.pruned

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def logical(self) -> int:
        """Trials as the budget sees them: a retry continues an earlier trial, it is not a new one."""
        return self.total - self.retries

    @property
    def started(self) -> int:
        """Logical trials taken by a worker at some point: not those still queued unstarted."""
        return self.logical - self.unstarted

    @property
    def finished_logical(self) -> int:
        """Logical trials that reached a final state and will not be retried."""
        return self.logical - self.state("RUNNING") - self.state("WAITING")

    def done(self, budget: int) -> bool:
        """The budget's trials have all finished, and none runs or waits for a retry. (Unstarted queued
        trials keep the logical trials finished under a budget that counts them; past one lowered by
        an early stop, they wait for the next run.)"""
        return self.finished_logical >= budget and self.state("RUNNING") + self.state("WAITING") == self.unstarted


def count_trials(bind: Engine | Connection, study_id: int) -> TrialCounts:
    return count_trials_and_attr(bind, study_id, None)[0]


def count_trials_and_attr(bind: Engine | Connection, study_id: int, key: str | None) -> tuple[TrialCounts, Any]:
    """The counts, each state apart, and one study user attribute (JSON-decoded, ``None`` if unset) in
    one round trip."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return count_trials_and_attr(conn, study_id, key)
    rows = bind.execute(_COUNTS, {"sid": study_id, "key": key}).fetchall()
    extra = next(r for r in rows if r.state is None)
    raw = extra.attr
    states = [r for r in rows if r.state is not None]
    by_state = {str(getattr(r.state, "name", r.state)): int(r.n) for r in states}
    unstarted = by_state.get("WAITING", 0) - int(extra.waiting_retries or 0)
    counts = TrialCounts(by_state, int(extra.retries or 0), int(extra.resumed or 0), int(extra.paused or 0),
                         int(extra.evicted or 0), unstarted)  # fmt: skip
    return counts, None if raw is None else json.loads(raw)


def claim_counts(bind: Engine | Connection, study_id: int, *keys: str) -> tuple[TrialCounts, dict[str, Any]]:
    """What a claim reads under the study lock, in one round trip: the counts, and those of the study's
    user attributes ``keys`` set to something other than null (JSON-decoded).

    Every statement under the lock is paid by every worker in turn. A claim needs of the counts only
    the running, queued and logical trials, so the finished trials are counted as one state,
    ``FINISHED`` (not COMPLETE, PRUNED or FAIL, which read as 0, nor paused and resumed attempts),
    from the indexes alone, where telling them apart reads every trial of the study (about 25 ms at
    100,000 trials, inside the lock).
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return claim_counts(conn, study_id, *keys)
    rows = bind.execute(_CLAIM_COUNTS, {"sid": study_id, "keys": list(keys)}).all()
    row = next(r for r in rows if r.key is None)
    running, waiting = int(row.running), int(row.waiting)
    by_state = {"RUNNING": running, "WAITING": waiting, FINISHED: int(row.n) - running - waiting}
    counts = TrialCounts({k: v for k, v in by_state.items() if v}, int(row.retries or 0),
                         unstarted=waiting - int(row.waiting_retries or 0))  # fmt: skip
    attrs = {r.key: value for r in rows if r.key is not None and (value := json.loads(r.value_json)) is not None}
    return counts, attrs


def study_attrs(bind: Engine | Connection, study_id: int, *keys: str) -> dict[str, Any]:
    """Those of the study's user attributes set to something other than null (JSON-decoded), read alone:
    index lookups. (An attribute cleared is set to null: Optuna cannot delete one.)"""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return study_attrs(conn, study_id, *keys)
    rows = bind.execute(_ATTRS, {"sid": study_id, "keys": list(keys)}).all()
    return {key: value for key, raw in rows if (value := json.loads(raw)) is not None}
