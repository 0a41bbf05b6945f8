"""Where a pruner can decide: asking it at every other epoch costs database reads and changes nothing.

``trial.should_prune()`` reads the trial back and lets the pruner read the study (two or three
transactions an epoch). Each epoch is still reported (the dashboard's curves and a retry's
history need every value), but the pruner is asked only at the epochs where it could return
True or record something, given the last epoch at which this attempt asked it:

* ``none``: never.
* a median pruner with a fixed warm-up: from the warm-up on, at the first epoch of each interval
  (Optuna's own rule, on the epochs the trial has reported).
* successive halving and Hyperband with a fixed first rung: at an epoch that reaches a rung the
  last ask had not reached (Hyperband: a rung of any bracket). An ask that does not prune passes
  every rung up to its epoch, so nothing between two rungs can change the answer.
* successive halving with ``min=auto``: every epoch until this process knows the first rung, then
  as above.
* anything else (``median:warmup=auto``, whose warm-up follows the complete trials; a pruner this
  module does not know): every epoch.

The first ask of an attempt is always made, but for ``none`` (a retry's inherited rungs are caught
up there).
``tests/search/test_pruning_equivalence.py`` checks that the decisions are those of asking at
every epoch, for every pruner the CLI offers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def may_prune_at(pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
    """Whether ``pruner`` could prune (or record a rung) at ``step``; ``steps`` are the reported epochs."""
    import optuna  # imported here: the CLI's start-up does not need it

    if type(pruner) is optuna.pruners.NopPruner:
        return False
    if last_asked is None:
        return True
    if type(pruner) is optuna.pruners.MedianPruner:
        from storage import interval_steps, is_first_in_interval_step, warmup_steps

        warmup, interval = warmup_steps(pruner), interval_steps(pruner)
        return step >= warmup and is_first_in_interval_step(step, steps, warmup, interval)
    rungs = _rungs(pruner)
    if rungs is None:
        return True
    first, factor = rungs
    if first < 1 or factor < 2:
        return True
    rung = first
    while rung <= step:
        if rung > last_asked:
            return True
        rung *= factor
    return False


def reads_running_trials(pruner: Any) -> bool:
    """Whether ``pruner`` reads other running trials (their values, their rung records): the median
    and percentile rules, Wilcoxon's and a threshold read only this trial's values and complete
    trials, so the study they are handed may hold the running ones as first read, and this trial's
    system attributes (rung records) need not be read at all (``storage.StudyTrials``)."""
    import optuna

    from search.settings._pruners import AdaptiveMedian
    from storage import wrapped_pruner

    if isinstance(pruner, optuna.pruners.PatientPruner):
        return wrapped_pruner(pruner) is not None and reads_running_trials(wrapped_pruner(pruner))
    alone = (optuna.pruners.PercentilePruner, optuna.pruners.NopPruner, optuna.pruners.ThresholdPruner,
             optuna.pruners.WilcoxonPruner, AdaptiveMedian)  # fmt: skip
    return not isinstance(pruner, alone)  # MedianPruner is a PercentilePruner


def _rungs(pruner: Any) -> tuple[int, int] | None:
    """The first rung and the factor between rungs (every bracket's rungs lie on them), if fixed."""
    from search.settings._pruners import AdaptiveSuccessiveHalving, RetryAwareHyperband, RetryAwareSuccessiveHalving
    from storage import min_early_stopping_rate, min_resource, reduction_factor

    if type(pruner) is RetryAwareSuccessiveHalving:
        factor = reduction_factor(pruner)
        return int(min_resource(pruner)) * factor ** min_early_stopping_rate(pruner), factor
    if type(pruner) is RetryAwareHyperband:
        return int(min_resource(pruner)), reduction_factor(pruner)
    if type(pruner) is AdaptiveSuccessiveHalving and pruner._min is not None:
        return pruner._min, pruner._factor
    return None
