"""A trial's params: chosen in memory, stored in one transaction, asked for again after a lost connection."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Container
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination import retrying

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

    from studies import Study


class _HeldParams:
    """The study's storage as a trial sees it while its params are suggested: each param is kept
    back (Optuna would commit each alone) until :meth:`store` writes them all in one transaction.
    Everything else goes to the storage itself."""

    def __init__(self, storage: optuna.storages.RDBStorage) -> None:
        self._storage = storage
        self.held: list[tuple[str, float, BaseDistribution]] = []

    def set_trial_param(self, trial_id: int, name: str, value: float, distribution: BaseDistribution) -> None:
        self.held.append((name, value, distribution))

    def store(self, trial_id: int) -> None:
        held, self.held = self.held, []
        st.set_trial_params(self._storage, trial_id, held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


class _OneRead:
    """The study's storage as its sampler sees it while a trial's params are suggested: the study's
    trials are read once, for all of them. Everything else goes to the storage.

    TPE with constant liar (the default) reads the whole study again for every param (Optuna's
    per-trial cache is off for it, so that running trials are seen as they start): a database
    round trip each, most of a suggestion's time. A trial's params are chosen within milliseconds
    of each other, so they are chosen from one read: the one the claim made just after creating
    the trial (``trials``, Optuna's per-trial cache), or else one at the first param.
    """

    def __init__(self, storage: optuna.storages.BaseStorage, trials: list[FrozenTrial] | None = None) -> None:
        self._storage = storage
        self._trials = trials

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:  # fmt: skip
        if self._trials is None:
            self._trials = self._storage.get_all_trials(study_id, deepcopy=False)
        trials = self._trials if states is None else [t for t in self._trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def suggest_params(study: Study, storage: optuna.storages.RDBStorage, trial: optuna.trial.Trial) -> Any:
    """``study.suggest(trial)``, its params stored in one transaction, retried while the database is
    unreachable.

    A write whose reply was lost may have committed: Optuna, which only knows the values it saw
    stored, would sample those params again and hand back new values for stored ones. So every
    retry first re-reads the trial, and stored values are used, not sampled again. The params are
    stored all or none, so a retry finds either all of them or none.
    """
    tries = 0

    def suggest() -> Any:
        nonlocal tries
        tries += 1
        if tries > 1:
            st.set_cached_frozen_trial(trial, storage.get_trial(st.trial_id(trial)))
        # The trial writes its params through its own storage attribute; samplers read the study
        # through the study's.
        held, own_storage, study_storage = _HeldParams(storage), trial.storage, st.study_storage(trial.study)
        trial.storage = held  # type: ignore[assignment]
        # The claim's read of the study, if this is the first try (a retry reads the study again).
        claimed = st.cached_trials(trial.study) if tries == 1 else None
        st.set_study_storage(trial.study, _OneRead(study_storage, claimed))
        try:
            params = study.suggest(trial)
        except Exception:
            with contextlib.suppress(Exception):  # the study's own error is the one to report
                held.store(st.trial_id(trial))  # a failed trial still shows what it was given
            raise
        finally:
            trial.storage = own_storage
            st.set_study_storage(trial.study, study_storage)
        held.store(st.trial_id(trial))
        return params

    return retrying(suggest, f"suggesting params for trial {trial.number}")
