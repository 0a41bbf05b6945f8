"""A trial's params, asked for again after a lost connection without training what was not stored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.coordination import retrying

if TYPE_CHECKING:
    import optuna

    from studies import Study


def suggest_params(study: Study, storage: optuna.storages.BaseStorage, trial: optuna.trial.Trial) -> Any:
    """``study.suggest(trial)``, retried while the database is unreachable.

    A write whose reply was lost may have committed: Optuna, which only knows the values it saw
    stored, would sample that parameter again, keep the stored value and hand back the new one.
    So every retry first re-reads the trial, and a stored value is used, not sampled again.
    """
    tries = 0

    def suggest() -> Any:
        nonlocal tries
        tries += 1
        if tries > 1:
            trial._cached_frozen_trial = storage.get_trial(trial._trial_id)
        return study.suggest(trial)

    return retrying(suggest, f"suggesting params for trial {trial.number}")
