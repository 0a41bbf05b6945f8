"""Optuna's rung-based pruners, made to see a study's logical trials rather than its attempts.

A trial whose worker died is retried as a new Optuna trial (a new number) carrying the dead
attempt's params, reported values and rung records. Plain Optuna would then put the retry in
another Hyperband bracket (brackets hash the trial number), where the inherited rung records
may leave it unprunable, and the dead attempt would keep voting in the rungs next to its retry.
Here a retry keeps its logical trial's number for its bracket, and an attempt that has a retry
(it is superseded) takes no part: the decisions are those of a single process that never lost
a worker (``tests/search/test_pruning_equivalence.py``).
"""

from __future__ import annotations

import binascii
from collections.abc import Container
from typing import TYPE_CHECKING, Any

import optuna
from optuna.pruners import HyperbandPruner, SuccessiveHalvingPruner

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial, TrialState


def logical_number(trial: FrozenTrial) -> int:
    """The number of the first attempt of ``trial``'s logical trial (itself unless it is a retry)."""
    return int(trial.system_attrs.get("failed_trial", trial.number))


def superseded(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of attempts that a retry continues."""
    return {int(n) for t in trials for n in t.system_attrs.get("retry_history", ())}


class _LogicalTrials:
    """A study as a pruner reads it: every method of the study, but ``get_trials`` leaves out superseded attempts."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._skip = superseded(study.get_trials(deepcopy=False))

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return [t for t in self._study.get_trials(deepcopy=deepcopy, states=states) if t.number not in self._skip]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


class RetryAwareSuccessiveHalving(SuccessiveHalvingPruner):
    def __init__(self, min_resource: int, reduction_factor: int, min_early_stopping_rate: int, bootstrap: int) -> None:
        super().__init__(min_resource=min_resource, reduction_factor=reduction_factor,
                         min_early_stopping_rate=min_early_stopping_rate, bootstrap_count=bootstrap)  # fmt: skip

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return super().prune(_LogicalTrials(study), trial)  # type: ignore[arg-type]


class RetryAwareHyperband(HyperbandPruner):
    """Hyperband whose bracket follows the logical trial; superseded attempts belong to no bracket."""

    def __init__(self, min_resource: int, max_resource: int, reduction_factor: int) -> None:
        super().__init__(min_resource=min_resource, max_resource=max_resource, reduction_factor=reduction_factor)
        self._skip: set[int] = set()
        self._ordinal: dict[int, int] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        trials = study.get_trials(deepcopy=False)
        self._skip = superseded(trials)
        # Retries take trial numbers too: the n-th logical trial is numbered n only in a study
        # that never retried, so brackets go by the logical trial's place among first attempts.
        firsts = sorted(t.number for t in trials if "failed_trial" not in t.system_attrs)
        self._ordinal = {number: index for index, number in enumerate(firsts)}
        return super().prune(study, trial)

    def _get_bracket_id(self, study: optuna.Study, trial: FrozenTrial) -> int:
        if not self._pruners:
            return 0
        if trial.number in self._skip:
            return -1
        assert self._n_brackets is not None
        first = logical_number(trial)
        # Optuna's own rule, on the number the trial would have had if no worker had died.
        key = f"{study.study_name}_{self._ordinal.get(first, first)}"
        n = binascii.crc32(key.encode()) % self._total_trial_allocation_budget
        for bracket_id in range(self._n_brackets):
            n -= self._trial_allocation_budgets[bracket_id]
            if n < 0:
                return bracket_id
        raise AssertionError("unreachable: the allocation budgets sum to the total")
