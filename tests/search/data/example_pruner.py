"""An example pruner, as a developer would add it in ``search/settings/pruners/_example.py``:
prune a trial whose value at an epoch is worse than ``factor`` times the best complete trial's
value at that epoch (a minimised metric), from epoch ``warmup`` on.

``tests/search/settings/test_pruner_registry.py`` registers it with the one line a developer would add to
``search/settings/pruners/__init__.py`` and runs a study with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import TrialState

from search.settings import PrunerSpec
from search.settings._spec import Option


class BeyondBest(optuna.pruners.BasePruner):
    def __init__(self, factor: float, warmup: int) -> None:
        self.factor, self.warmup = factor, warmup

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.warmup:
            return False
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = [t.intermediate_values[step] for t in complete if step in t.intermediate_values]
        return bool(best) and trial.intermediate_values[step] > self.factor * min(best)


class Example(PrunerSpec):
    name = "example"
    options = {
        "factor": Option(float, 1.5, "prune beyond this many times the best complete trial's value"),
        "warmup": Option(int, 1, "epochs a trial runs before it can be pruned"),
    }
    reads_running_trials = False  # this trial's values and the complete trials'

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        return (BeyondBest,)

    def check(self, search_epochs: int) -> None:
        if self["factor"] < 1:
            raise self.refuse("factor must be >= 1")

    def build(self, search_epochs: int) -> optuna.pruners.BasePruner:
        self.check(search_epochs)
        return BeyondBest(self["factor"], self["warmup"])

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        return step >= pruner.warmup

    def describe(self) -> str:
        return f"prune beyond {self['factor']:g} x the best complete trial at each epoch, from epoch {self['warmup']}"
