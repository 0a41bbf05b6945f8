"""Where a pruner can decide: asking it at every other epoch costs database reads and changes nothing.

``trial.should_prune()`` reads the trial back and lets the pruner read the study (two or three
transactions an epoch). Each epoch is still reported (the dashboard's curves and a retry's
history need every value), but the pruner is asked only at the epochs where it could return
True or record something, given the last epoch at which this attempt asked it. Each pruner's
class says where (``may_prune_at`` in ``search/settings/pruners/``), found by the class of the
pruner it built; the rules:

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
``tests/search/execution/test_pruning_equivalence.py`` checks that the decisions are those of asking at
every epoch, for every pruner the CLI offers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _spec_of(pruner: Any) -> Any:
    """The class in the registry whose ``build`` makes pruners of ``pruner``'s class, if any."""
    from search.settings.pruners import PRUNERS

    return next((spec for spec in PRUNERS.values() if type(pruner) in spec.built_types()), None)


def may_prune_at(pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
    """Whether ``pruner`` could prune (or record a rung) at ``step``; ``steps`` are the reported epochs."""
    spec = _spec_of(pruner)
    return True if spec is None else bool(spec.may_prune_at(pruner, step, last_asked, steps))


def pausing_spec(pruner: Any) -> Any:
    """The registry class of ``pruner`` if its "prune" means pause (freeze-thaw), else None."""
    spec = _spec_of(pruner)
    return spec if spec is not None and spec.pauses else None


def exploiting_spec(pruner: Any) -> Any:
    """The registry class of ``pruner`` if its "prune" means replace (population-based training), else None."""
    spec = _spec_of(pruner)
    return spec if spec is not None and spec.exploits else None


def reads_running_trials(pruner: Any) -> bool:
    """Whether ``pruner`` reads other running trials (their values, their rung records): the median
    and percentile rules, Wilcoxon's and a threshold read only this trial's values and complete
    trials, so the study they are handed may hold the running ones as first read, and this trial's
    system attributes (rung records) need not be read at all (``storage.StudyTrials``)."""
    import optuna

    spec = _spec_of(pruner)
    if spec is not None:
        return bool(spec.reads_running_trials)
    from storage import wrapped_pruner

    if isinstance(pruner, optuna.pruners.PatientPruner):
        return wrapped_pruner(pruner) is not None and reads_running_trials(wrapped_pruner(pruner))
    alone = (optuna.pruners.PercentilePruner, optuna.pruners.NopPruner, optuna.pruners.ThresholdPruner,
             optuna.pruners.WilcoxonPruner)  # fmt: skip
    return not isinstance(pruner, alone)  # MedianPruner is a PercentilePruner
