"""A trial's params: chosen in memory, stored in one transaction, asked for again after a lost connection."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination import retrying

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

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
            trial._cached_frozen_trial = storage.get_trial(trial._trial_id)
        held = _HeldParams(storage)
        trial.storage = held  # type: ignore[assignment]  # Trial writes its params through this attribute
        try:
            params = study.suggest(trial)
        except Exception:
            with contextlib.suppress(Exception):  # the study's own error is the one to report
                held.store(trial._trial_id)  # a failed trial still shows what it was given
            raise
        finally:
            trial.storage = storage
        held.store(trial._trial_id)
        return params

    return retrying(suggest, f"suggesting params for trial {trial.number}")
