"""A study as a sampler sees it through a window: its trial reads pass through a selection.

Optuna's samplers read a study's trials with ``Study._get_trials`` (TPE: for its search space, its
start-up count and its two densities). A study seen through :func:`study_seeing` answers those reads
with ``select(trials)``, then filters by state as Optuna would; everything else is the study's own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial, TrialState

Select = Callable[[list["FrozenTrial"]], list["FrozenTrial"]]


class _Seeing:
    def __init__(self, study: optuna.Study, select: Select) -> None:
        self._seen_study = study
        self._select = select

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:  # fmt: skip
        trials = self._select(self._seen_study._get_trials(deepcopy=False, use_cache=use_cache))
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy, states, use_cache=False)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._seen_study, name)


def study_seeing(study: optuna.Study, select: Select) -> optuna.Study:
    """``study``, whose trials a sampler reads as ``select(every trial)`` (in trial order)."""
    return _Seeing(study, select)  # type: ignore[return-value]
