"""A worker's copy of its study's trials, brought up to date in the transaction that reports an epoch.

A pruner reads the whole study at every decision (Optuna's ``study.get_trials``): one more
transaction an epoch, and every trial's params, attributes and curve sent each time. Finished
trials never change, so this copy keeps them and fetches only the trials it has not seen finished;
and it does so in the transaction that stores the epoch's value, so a reported epoch whose pruner
is asked costs one transaction, not two. What the pruner sees is what a full read at that moment
returns (``tests/search/test_pruning_equivalence.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

_CHUNK = 500  # trial ids per IN (...): under every database's limit on bound parameters


class StudyTrials:
    """The trials of one study as of the last :meth:`report` that refreshed them, in trial order."""

    def __init__(self, storage: RDBStorage, study_id: int) -> None:
        self._storage = storage
        self._study_id = study_id
        self._finished: dict[int, FrozenTrial] = {}  # by trial_id; a finished trial never changes
        self.trials: list[FrozenTrial] = []
        self.fetched = 0  # trials read in full, for tests and benchmarks

    def report(self, trial_id: int, step: int, value: float | None, *, refresh: bool) -> None:
        """Store ``value`` at ``step`` for the trial (unless None) and, if ``refresh``, read what changed.

        One transaction, safe to repeat after a lost connection (the value is stored again, the
        same). Storing checks, as Optuna does, that the trial is still running.
        """
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(self._storage.scoped_session, True) as session:
            if value is not None:
                self._storage._set_trial_intermediate_value_without_commit(session, trial_id, step, value)
                session.flush()
            if refresh:
                self._refresh(session)

    def get(self, trial_id: int) -> FrozenTrial:
        return next(t for t in self.trials if t._trial_id == trial_id)

    def _refresh(self, session: object) -> None:
        from optuna.storages._rdb import models
        from sqlalchemy import orm

        query = session.query  # type: ignore[attr-defined]
        ids = [tid for (tid,) in query(models.TrialModel.trial_id).filter(
            models.TrialModel.study_id == self._study_id).order_by(models.TrialModel.trial_id)]  # fmt: skip
        wanted = [tid for tid in ids if tid not in self._finished]
        fresh: dict[int, FrozenTrial] = {}
        for start in range(0, len(wanted), _CHUNK):
            rows = (
                query(models.TrialModel)
                .options(
                    orm.selectinload(models.TrialModel.params),
                    orm.selectinload(models.TrialModel.values),
                    orm.selectinload(models.TrialModel.user_attributes),
                    orm.selectinload(models.TrialModel.system_attributes),
                    orm.selectinload(models.TrialModel.intermediate_values),
                )
                .filter(models.TrialModel.trial_id.in_(wanted[start : start + _CHUNK]))
                .populate_existing()  # the reporting trial was loaded before its new value
                .all()
            )
            for row in rows:
                trial = self._storage._build_frozen_trial_from_trial_model(row)
                fresh[trial._trial_id] = trial
                if trial.state.is_finished():
                    self._finished[trial._trial_id] = trial
        self.fetched += len(fresh)
        self.trials = [self._finished.get(tid) or fresh[tid] for tid in ids if tid in self._finished or tid in fresh]
