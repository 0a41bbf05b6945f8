"""Every read or write of an Optuna private attribute or function the project makes, one function each.

Optuna gives no public way to a trial's or study's id, a study's storage, its per-trial caches,
its pruners' settings or a storage's sessions and table models, and the project needs them to
take trials on the study lock's connection, store a trial's params and values in one transaction
and read the study once per decision. When Optuna changes one of them, this is where it shows.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage, RDBStorage
    from optuna.trial import FrozenTrial


# Trials and studies.


def trial_id(trial: optuna.trial.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (its ``number`` counts within the study; this counts across studies)."""
    return trial._trial_id


def study_id(study: optuna.Study) -> int:
    return study._study_id


def study_storage(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes through (its samplers read the study from it)."""
    return study._storage


def set_study_storage(study: optuna.Study, storage: Any) -> None:
    study._storage = storage


def cached_frozen_trial(trial: optuna.trial.Trial) -> FrozenTrial:
    """A running trial's own copy of itself: what it has suggested and reported in this process."""
    return trial._cached_frozen_trial


def set_cached_frozen_trial(trial: optuna.trial.Trial, frozen: FrozenTrial) -> None:
    trial._cached_frozen_trial = frozen


def cached_trials(study: optuna.Study) -> list[FrozenTrial] | None:
    """The study's trials as Optuna's per-trial cache holds them in this thread, if it does."""
    return getattr(study._thread_local, "cached_all_trials", None)


def set_cached_trials(study: optuna.Study, trials: list[FrozenTrial] | None) -> None:
    """Fill (or with ``None`` clear, as ``tell`` does) Optuna's per-trial cache of the study's trials."""
    study._thread_local.cached_all_trials = trials


def cached_study_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's trials, from Optuna's per-trial cache when it holds them (not copied)."""
    return study._get_trials(deepcopy=False, use_cache=True)


def pop_waiting_trial_id(study: optuna.Study) -> int | None:
    """Optuna's own take of the study's oldest WAITING trial (RUNNING now), if there is one."""
    return study._pop_waiting_trial_id()


def filter_study(study: optuna.Study, trial: FrozenTrial) -> optuna.Study:
    """The study as ``tell`` hands it to the sampler's ``after_trial``."""
    from optuna import pruners

    return pruners._filter_study(study, trial)


def constraint_key(name: str) -> str:
    """The trial system attribute holding constraint ``name``'s value, as ``Trial.set_constraint``
    writes it (Optuna 5): its samplers and ``best_trials`` read ``FrozenTrial.constraints`` from these."""
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    return f"{_CONSTRAINTS_KEY}:{name}"


# Pruners' and samplers' settings.


def warmup_steps(pruner: optuna.pruners.PercentilePruner) -> int:
    return pruner._n_warmup_steps


def interval_steps(pruner: optuna.pruners.PercentilePruner) -> int:
    return pruner._interval_steps


def best_intermediate_value(trial: FrozenTrial, direction: Any) -> float:
    """The percentile rules' best of a trial's reported values (NaN if none is a number)."""
    from optuna.pruners._percentile import _get_best_intermediate_result_over_steps

    return float(_get_best_intermediate_result_over_steps(trial, direction))


def is_first_in_interval_step(step: int, steps: Any, warmup: int, interval: int) -> bool:
    """The median and percentile rules' test of whether they decide at ``step``."""
    from optuna.pruners._percentile import _is_first_in_interval_step

    return _is_first_in_interval_step(step, steps, warmup, interval)


def is_promotable(value: float, competing: list[float], reduction_factor: int, direction: Any) -> bool:
    """Successive halving's test of whether ``value`` goes on to the next rung among ``competing``."""
    from optuna.pruners._successive_halving import _is_trial_promotable_to_next_rung

    return _is_trial_promotable_to_next_rung(value, competing, reduction_factor, direction)


def wrapped_pruner(pruner: optuna.pruners.PatientPruner) -> Any:
    return pruner._wrapped_pruner


def min_resource(pruner: Any) -> Any:
    """A successive-halving or Hyperband pruner's first rung (``"auto"`` until a Hyperband sees a trial)."""
    return pruner._min_resource


def reduction_factor(pruner: Any) -> int:
    return pruner._reduction_factor


def min_early_stopping_rate(pruner: optuna.pruners.SuccessiveHalvingPruner) -> int:
    return pruner._min_early_stopping_rate


def hyperband_brackets(pruner: optuna.pruners.HyperbandPruner) -> tuple[list[Any], int | None, int, list[int]]:
    """A Hyperband pruner's bracket pruners, their number, and its trial allocation budget: total and per bracket."""
    return pruner._pruners, pruner._n_brackets, pruner._total_trial_allocation_budget, pruner._trial_allocation_budgets


def bracket_id(pruner: optuna.pruners.HyperbandPruner, study: Any, trial: FrozenTrial) -> int:
    return pruner._get_bracket_id(study, trial)


def share_random_stream(source: optuna.samplers.TPESampler, target: optuna.samplers.TPESampler) -> None:
    """Make ``target`` draw from ``source``'s random generators (its own and its start-up sampler's)."""
    target._rng, target._random_sampler = source._rng, source._random_sampler


# An RDBStorage's sessions and table models.


def rdb_models() -> ModuleType:
    """Optuna's table models (``optuna.storages._rdb.models``): the tables' names, columns and value codings."""
    from optuna.storages._rdb import models

    return models


def scoped_session(storage: RDBStorage, ignore_integrity_error: bool = False) -> AbstractContextManager[Any]:
    """A session of ``storage`` as Optuna's own methods use one: committed at the end, rolled back on
    an error, which is raised as Optuna's storage raises it (an integrity error dropped if asked)."""
    from optuna.storages._rdb.storage import _create_scoped_session

    return _create_scoped_session(storage.scoped_session, ignore_integrity_error)


def trial_time_columns() -> tuple[Any, Any]:
    """The trials table's start and completion times as stored (naive UTC), not converted as the models read them."""
    trial = rdb_models().TrialModel
    return trial._datetime_start_utc, trial._datetime_complete_utc


def study_of_trials(trials: list[FrozenTrial], direction: str, user_attrs: dict[str, Any]) -> optuna.Study:
    """An in-memory study of ``trials`` (a sample of a large study, for Optuna's plots) that keeps
    their numbers: Optuna's ``add_trials`` numbers them anew from 0."""
    import optuna

    study = optuna.create_study(direction=direction)  # type: ignore[arg-type]  # "minimize" or "maximize"
    study.add_trials(trials)
    for kept, original in zip(study._storage._studies[study._study_id].trials, trials, strict=True):  # type: ignore[attr-defined]
        kept.number = original.number
    for key, value in user_attrs.items():
        study.set_user_attr(key, value)
    return study
