"""A worker's copy of its study's trials, brought up to date in the transaction that reports an epoch.

A pruner reads the whole study at every decision (Optuna's ``study.get_trials``): one more
transaction an epoch, and every trial's params, attributes and curve sent each time. Finished
trials never change, so this copy keeps them and fetches only the trials it has not seen finished;
and it does so in the transaction that stores the epoch's value, so a reported epoch whose pruner
is asked costs one transaction, not two. What the pruner sees is what a full read at that moment
returns (``tests/search/test_pruning_equivalence.py``). The reporting trial itself is not read
back: its reporter holds its params and values; only its system attributes (rung records) are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

_CHUNK = 500  # trial ids per IN (...): under every database's limit on bound parameters


class StudyTrials:
    """The trials of one study as of the last :meth:`report` that refreshed them, in trial order,
    all but the reporting trial itself (its reporter knows it): of that one only its system
    attributes (a pruner's rung records) are read."""

    def __init__(self, storage: RDBStorage, study_id: int) -> None:
        self._storage = storage
        self._study_id = study_id
        self._finished: dict[int, FrozenTrial] = {}  # by trial_id; a finished trial never changes
        self._order: list[int] = []
        self._others: dict[int, FrozenTrial] = {}
        self.own_system_attrs: dict[str, Any] = {}
        self.fetched = 0  # trials read in full, for tests and benchmarks

    def report(self, trial_id: int, step: int, value: float | None, *, refresh: bool) -> None:
        """Store ``value`` at ``step`` for the trial (unless None) and, if ``refresh``, read what changed.

        One transaction, safe to repeat after a lost connection (the value is stored again, the
        same). Storing checks, as Optuna does, that the trial is still running.
        """
        from optuna.storages._rdb.storage import _create_scoped_session

        from storage._optuna import set_intermediate_value

        with _create_scoped_session(self._storage.scoped_session, True) as session:
            if value is not None:
                set_intermediate_value(self._storage, session, trial_id, step, value)
            if refresh:
                self._refresh(session, trial_id)

    def refresh(self) -> list[FrozenTrial]:
        """Read what changed since the last read (a follower's view: no trial of its own); every trial."""
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(self._storage.scoped_session) as session:
            self._refresh(session, None)
        return [self._others[tid] for tid in self._order if tid in self._others]

    def with_own(self, own: FrozenTrial) -> list[FrozenTrial]:
        """The study's trials as last read, with ``own`` (the reporting trial) in its place."""
        return [own if tid == own._trial_id else self._others[tid] for tid in self._order
                if tid == own._trial_id or tid in self._others]  # fmt: skip

    def _refresh(self, session: Any, own_id: int | None) -> None:
        from optuna.storages._rdb import models
        from sqlalchemy import orm, select

        trial_model, attr_model = models.TrialModel, models.TrialSystemAttributeModel
        ids = list(session.scalars(select(trial_model.trial_id).where(trial_model.study_id == self._study_id)
                                   .order_by(trial_model.trial_id)))  # fmt: skip
        wanted = [tid for tid in ids if tid not in self._finished and tid != own_id]
        fresh: dict[int, FrozenTrial] = {}
        for start in range(0, len(wanted), _CHUNK):
            rows = (
                session.query(trial_model)
                .options(
                    orm.selectinload(trial_model.params),
                    orm.selectinload(trial_model.values),
                    orm.selectinload(trial_model.user_attributes),
                    orm.selectinload(trial_model.system_attributes),
                    orm.selectinload(trial_model.intermediate_values),
                )
                .filter(trial_model.trial_id.in_(wanted[start : start + _CHUNK]))
                .all()
            )
            for row in rows:
                trial = self._storage._build_frozen_trial_from_trial_model(row)
                fresh[trial._trial_id] = trial
                if trial.state.is_finished():
                    self._finished[trial._trial_id] = trial
        if own_id is not None:
            query = select(attr_model.key, attr_model.value_json).where(attr_model.trial_id == own_id)
            self.own_system_attrs = {key: json.loads(value) for key, value in session.execute(query)}
        self.fetched += len(fresh)
        self._order = ids
        self._others = {
            tid: self._finished.get(tid) or fresh[tid] for tid in ids if tid in self._finished or tid in fresh
        }
