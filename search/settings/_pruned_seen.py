"""A sampler that models complete trials only (Optuna's ``GPSampler``), shown the pruned ones too.

Optuna's Gaussian process reads complete (and running) trials and nothing else: a region the
pruner cut short is invisible to it, so it keeps proposing there, and each such trial is pruned
again. Shown each pruned trial as complete at the worst complete value (TPE's own reading puts
pruned trials below every complete one), the model learns that what was tried there was bad
(docs/experiments/2026-11-30-gp-reads-pruned-trials.md).
"""

from __future__ import annotations

import copy
from typing import Any

from optuna.samplers import BaseSampler
from optuna.trial import TrialState

from search.settings._pruners import superseded
from search.settings._seeing import SeeingSampler


class PrunedAsWorst(SeeingSampler):
    """``inner`` reads every pruned trial that reported a value as complete at the worst complete
    value, once a trial is complete. Not in a study with several objectives or with constraints (a
    pruned trial has no constraint values): there it reads the study as it is."""

    def __init__(self, inner: BaseSampler) -> None:
        self.inner = inner

    def seen(self, study: Any, trial: Any) -> Any:
        from storage import study_seeing

        if len(study.directions) > 1:
            return study
        maximize = study.direction.name == "MAXIMIZE"
        return study_seeing(study, lambda trials: pruned_as_worst(trials, maximize))


def pruned_as_worst(trials: list[Any], maximize: bool) -> list[Any]:
    """``trials`` with each pruned one that reported a value read as complete at the worst complete
    value; unchanged while none is complete, or when a complete trial has constraints.

    Left as they are: an attempt that another goes on from (a paused trial resumed, a PBT
    continuation replaced: its continuation names it last in ``retry_history``), which is not a bad
    point, and a pruned trial without every parameter the complete trials share. An attempt that
    population-based training replaced (``exploited_at``) after it trained from its own sampled
    parameters (no ``pbt_parent``) is a bad point: it ranked in the bottom quantile, and its
    continuation goes on from another trial's weights with other parameters. Optuna's search space of the
    complete trials reads each trial once, as it finishes, and never again: one that turned
    complete later, missing a parameter of that space, would break the model's read of it.
    """
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not done or any(t.constraints for t in done):
        return trials
    values = [float(t.value) for t in done]
    worst = min(values) if maximize else max(values)
    shared = dict(done[0].distributions)
    for t in done[1:]:
        shared = {name: d for name, d in shared.items() if t.distributions.get(name) == d}
    continued = superseded(trials)

    def bad(t: Any) -> bool:
        replaced = "exploited_at" in t.user_attrs and "pbt_parent" not in t.user_attrs  # its own params lost
        return (t.state == TrialState.PRUNED and bool(t.intermediate_values) and (t.number not in continued or replaced)
                and all(t.distributions.get(name) == d for name, d in shared.items()))  # fmt: skip

    return [_complete_at(t, worst) if bad(t) else t for t in trials]


def _complete_at(trial: Any, value: float) -> Any:
    seen = copy.copy(trial)  # the stored trial is not touched: only what the sampler reads
    seen.state, seen.values = TrialState.COMPLETE, [value]
    return seen
