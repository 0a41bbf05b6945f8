"""The pruners whose "prune" means something else: pause (freeze-thaw) or replace (population-based training).

Their specs are ``pruners/_asha.py`` and ``pruners/_pbt.py``; what happens to a paused or replaced
trial is the service's (``search.coordination._paused``, ``search.execution._exploit``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import optuna

from search.settings._pruners import logical_number

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


class AshaPruner(optuna.pruners.BasePruner):
    """Freeze-thaw (``search/settings/pruners/_asha.py``): ``prune()`` True means *pause* this trial
    at its rung, as it is not in the top ``1/factor`` of the logical trials that reached it."""

    def __init__(self, first: int, factor: int, epochs: int, disk: int | None = None) -> None:
        from search.settings._freeze_thaw import rungs

        self.first, self.factor, self.epochs = first, factor, epochs
        self.disk = disk  # bytes the paused trials' checkpoints may take (None: unbounded)
        self.rungs = rungs(first, factor, epochs)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        from optuna.trial import TrialState

        from search.settings._freeze_thaw import budget_started, goes_on, logical_values

        step = trial.last_step
        if step is None or step not in self.rungs:
            return False
        trials = study.get_trials(deepcopy=False)
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        others = [t for t in trials if t.state in states and t.number != trial.number]
        values = logical_values([*others, trial])
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        if goes_on(values, logical_number(trial), step, self.factor, maximize):
            return False
        # Once the budget has all started, the best at its rung would be resumed as soon as it paused:
        # it goes on instead (one read of the study's attributes, at a rung where it would pause).
        spent = budget_started(study.user_attrs, trials)
        return not (spent and goes_on(values, logical_number(trial), step, self.factor, maximize, spent=True))


class PbtPruner(optuna.pruners.BasePruner):
    """Population-based training (``search/settings/pruners/_pbt.py``): ``prune()`` True means
    *replace* this trial, in the bottom ``quantile`` at an epoch ``interval`` divides."""

    def __init__(self, interval: int, quantile: float, min_trials: int, perturb: float, resample: float,
                 epochs: int) -> None:  # fmt: skip
        self.interval, self.quantile, self.min_trials = interval, quantile, min_trials
        self.perturb, self.resample, self.epochs = perturb, resample, epochs

    def ranked_at(self, study: optuna.Study, step: int, extra: FrozenTrial | None = None) -> list[int]:
        """The logical trials that reported ``step``, best first (finite values only)."""
        from optuna.trial import TrialState

        from search.settings._freeze_thaw import logical_values

        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        skip = None if extra is None else extra.number
        trials = [t for t in study.get_trials(deepcopy=False, states=states) if t.number != skip]
        values = logical_values([*trials, *([extra] if extra is not None else [])])
        reached = [(v[step], n) for n, v in values.items() if step in v and math.isfinite(v[step])]
        sign = -1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
        return [n for _, n in sorted(reached, key=lambda pair: (sign * pair[0], pair[1]))]

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step % self.interval or step >= self.epochs:
            return False
        ranked = self.ranked_at(study, step, trial)
        if len(ranked) < self.min_trials:
            return False
        cut = max(1, int(len(ranked) * self.quantile))
        return logical_number(trial) in ranked[len(ranked) - cut :]
