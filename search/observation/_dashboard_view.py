"""The study's storage as optuna-dashboard reads it: a large study's trials drawn, and only what changed read.

optuna-dashboard reads every trial of a study, in full, for its first page and again every ten
seconds while the page is open: at 100,000 trials that is minutes per read and hundreds of MB to the
browser. This view serves the same list, in trial order, but drawn as the report draws a large
study (:func:`search.observation._report_draw.choose`: every trial that improved on the best so far,
the best ones, the running ones, the rest evenly spaced) from the trials there were when
the page first asked, followed by every trial created since, as it comes. A study of up to
``REPORT_TRIALS`` trials is drawn whole. Later reads fetch only the trials created since the last
one and those shown unfinished; finished trials never change. The list only grows at its end,
which is what the dashboard's own refresh (``after=N``: the trials from the N-th on) assumes.

A study with several objectives is read whole, as Optuna's storage reads it (its Pareto front needs
every trial, and the report draws it whole too).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Container
from typing import TYPE_CHECKING

from search.observation._report_draw import BEST_DRAWN, REPORT_TRIALS, choose

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial, TrialState


def dashboard_storage(storage: RDBStorage, view: DashboardView) -> RDBStorage:
    """``storage`` as optuna-dashboard gets it: the same storage (it checks that it is an Optuna
    storage, and an RDB one for its schema checks), whose ``get_all_trials`` is ``view``'s."""

    class Viewed(type(storage)):  # type: ignore[misc, valid-type]
        def get_all_trials(self, study_id: int, deepcopy: bool = True,
                           states: Container[TrialState] | None = None) -> list[FrozenTrial]:  # fmt: skip
            return view.get_all_trials(study_id, deepcopy, states)

    viewed = object.__new__(Viewed)
    viewed.__dict__ = storage.__dict__  # one storage: the same engine, caches and settings
    return viewed


class DashboardView:
    """The trials optuna-dashboard shows of the study ``study_id`` (other studies pass through)."""

    def __init__(self, storage: RDBStorage, study_id: int, maximize: bool, limit: int = REPORT_TRIALS,
                 best: int = BEST_DRAWN) -> None:  # fmt: skip
        self._storage = storage
        self._study_id = study_id
        self._maximize = maximize
        self._limit, self._best = limit, best
        self._lock = threading.Lock()  # the dashboard serves requests on several threads
        self._shown: list[int] = []  # trial ids, in trial order
        self._trials: dict[int, FrozenTrial] = {}
        self._numbers = -1  # trials numbered below it have been considered; -1: nothing read yet
        self.total = 0  # the study's trials when first read
        self.fetched = 0  # trials read in full, for tests
        self._several: bool | None = None  # several objectives: read whole

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:  # fmt: skip
        if self._several is None and study_id == self._study_id:
            self._several = len(self._storage.get_study_directions(study_id)) > 1
        if study_id != self._study_id or self._several:
            return self._storage.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        with self._lock:
            self._read()
            trials = [self._trials[tid] for tid in self._shown if tid in self._trials]
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    @property
    def shown(self) -> int:
        """Trials in the list as last read."""
        return len(self._shown)

    def drawn(self) -> bool:
        """Whether the list is a sample (known once the study has been read)."""
        self._ensure_read()
        return self.total > self._limit

    def _ensure_read(self) -> None:
        with self._lock:
            if self._numbers < 0:
                self._read()

    def _read(self) -> None:
        import storage as st
        from storage._optuna_internals import scoped_session, trial_changes_query

        if self._numbers < 0:
            with self._storage.engine.connect() as conn:
                objectives = st.trial_objectives(conn, self._study_id)
            self.total = len(objectives)
            self._shown = choose(objectives, self._maximize, self._limit, self._best)
            self._numbers = max((number for _, number, *_ in objectives), default=-1) + 1
            wanted = list(self._shown)
        else:
            unfinished = [tid for tid in self._shown if not self._trials[tid].state.is_finished()]
            with scoped_session(self._storage) as session:
                rows = session.connection().execute(
                    trial_changes_query(), {"study": self._study_id, "count": self._numbers, "ids": unfinished}
                ).all()
            new = sorted((number, int(tid)) for tid, number, _ in rows if number is not None and number >= self._numbers)
            self._shown.extend(tid for _, tid in new)
            self._numbers = max([self._numbers, *(number + 1 for number, _ in new)])
            wanted = [*unfinished, *(tid for _, tid in new)]
        found = st.read_some(self._storage, wanted)
        self.fetched += len(found)
        self._trials.update(found)
        self._shown = [tid for tid in self._shown if tid in self._trials]  # a trial deleted meanwhile
