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

# Physical trials by state, how many are retries, paused attempts and evicted ones; one study user attribute
# (``:key``, none when NULL) and the paused attempts resumed since ride on an extra row whose state is
# NULL (a study with no trials has no other row). Those are counted by the attempts that resumptions
# name in ``resumed_from``, each once: the retry of a resumption whose worker died names it too.
_COUNTS = sqlalchemy.text(
    """
    SELECT NULL AS state, 0 AS n, 0 AS retries, 0 AS paused, 0 AS evicted,
           (SELECT count(DISTINCT r.value_json) FROM trial_user_attributes r
            JOIN trials rt ON rt.trial_id = r.trial_id WHERE rt.study_id = :sid AND r.key = 'resumed_from') AS resumed,
           (SELECT value_json FROM study_user_attributes WHERE study_id = :sid AND key = :key) AS attr
    UNION ALL
    SELECT t.state, count(*) AS n,
           sum(CASE WHEN a.trial_id IS NULL THEN 0 ELSE 1 END) AS retries,
           sum(CASE WHEN p.trial_id IS NULL THEN 0 ELSE 1 END) AS paused,
           sum(CASE WHEN e.trial_id IS NULL THEN 0 ELSE 1 END) AS evicted, 0 AS resumed, NULL AS attr
    FROM trials t
    LEFT JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = 'failed_trial'
    LEFT JOIN trial_user_attributes p ON p.trial_id = t.trial_id AND p.key = 'paused_at' AND t.state = 'PRUNED'
    LEFT JOIN trial_user_attributes e ON e.trial_id = t.trial_id AND e.key = 'paused_evicted' AND t.state = 'PRUNED'
    WHERE t.study_id = :sid
    GROUP BY t.state
    """
)


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
    def finished_logical(self) -> int:
        """Logical trials that reached a final state and will not be retried."""
        return self.logical - self.state("RUNNING") - self.state("WAITING")

    def done(self, budget: int) -> bool:
        """The budget's trials have all finished, and none runs or waits for a retry."""
        return self.finished_logical >= budget and self.state("RUNNING") + self.state("WAITING") == 0


def count_trials(bind: Engine | Connection, study_id: int) -> TrialCounts:
    return count_trials_and_attr(bind, study_id, None)[0]


def count_trials_and_attr(bind: Engine | Connection, study_id: int, key: str | None) -> tuple[TrialCounts, Any]:
    """The counts and one study user attribute (JSON-decoded, ``None`` if unset) in one round trip.

    What a claim reads under the study lock: every statement there is paid by every worker in turn.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return count_trials_and_attr(conn, study_id, key)
    rows = bind.execute(_COUNTS, {"sid": study_id, "key": key}).fetchall()
    extra = next(r for r in rows if r.state is None)
    raw = extra.attr
    states = [r for r in rows if r.state is not None]
    by_state = {str(getattr(r.state, "name", r.state)): int(r.n) for r in states}
    retries, paused, evicted = (sum(int(getattr(r, k) or 0) for r in states) for k in ("retries", "paused", "evicted"))
    counts = TrialCounts(by_state, retries, int(extra.resumed or 0), paused, evicted)
    return counts, None if raw is None else json.loads(raw)
