"""Optuna's rung-based pruners, made to see a study's logical trials rather than its attempts.

A trial whose worker died is retried as a new Optuna trial (a new number) carrying the dead
attempt's params, reported values and rung records. Plain Optuna would then put the retry in
another Hyperband bracket (brackets hash the trial number), where the inherited rung records
may leave it unprunable, and the dead attempt would keep voting in the rungs next to its retry.
Here a retry keeps its logical trial's number for its bracket, and an attempt that has a retry
(it is superseded) takes no part: the decisions are those of a single process that never lost
a worker (``tests/search/execution/test_pruning_equivalence.py``).
"""

from __future__ import annotations

import binascii
import copy
import math
from collections.abc import Container
from typing import TYPE_CHECKING, Any

import optuna
from optuna.pruners import HyperbandPruner, SuccessiveHalvingPruner

from search.settings._record import FIRST_RUNG_ATTR

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
        # One read of the storage per pruning decision: the pruner's own get_trials is served from it.
        self._trials = study.get_trials(deepcopy=False)
        self._skip = superseded(self._trials)

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        kept = [t for t in self._trials if t.number not in self._skip and (states is None or t.state in states)]
        return copy.deepcopy(kept) if deepcopy else kept

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
        from storage import hyperband_brackets

        pruners, n_brackets, total_budget, budgets = hyperband_brackets(self)
        if not pruners:
            return 0
        if trial.number in self._skip:
            return -1
        assert n_brackets is not None
        first = logical_number(trial)
        # Optuna's own rule, on the number the trial would have had if no worker had died.
        key = f"{study.study_name}_{self._ordinal.get(first, first)}"
        n = binascii.crc32(key.encode()) % total_budget
        for bracket_id in range(n_brackets):
            n -= budgets[bracket_id]
            if n < 0:
                return bracket_id
        raise AssertionError("unreachable: the allocation budgets sum to the total")

    def _create_bracket_study(self, study: optuna.Study, bracket_id: int) -> optuna.Study:
        # Optuna's bracket study opens the study again from its storage and reads every trial
        # from there: two transactions per decision, and the worker's copy of the trials unused.
        return _BracketView(study, self, bracket_id)  # type: ignore[return-value]


class _BracketView:
    """One Hyperband bracket of a study: the trials the pruner places in it, read from ``study``."""

    def __init__(self, study: optuna.Study, pruner: RetryAwareHyperband, bracket_id: int) -> None:
        self._study, self._pruner, self._bracket_id = study, pruner, bracket_id

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        from storage import bracket_id

        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if bracket_id(self._pruner, self, t) == self._bracket_id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


def spearman(pairs: list[tuple[float, float]]) -> float:
    """Spearman rank correlation of ``(x, y)`` pairs (ranks by order, no tie correction)."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        for rank, index in enumerate(order):
            out[index] = float(rank)
        return out

    xs, ys = ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs])
    n = len(pairs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True))
    var = (sum((a - mx) ** 2 for a in xs) * sum((b - my) ** 2 for b in ys)) ** 0.5
    return cov / var if var else 0.0


def first_ranking_epoch(complete: list[FrozenTrial], threshold: float, confidence: float = 0.5) -> tuple[int, float]:
    """The first epoch whose values rank ``complete`` trials as their final values do (Spearman >= threshold).

    Before that epoch a curve says little about where it ends, and pruning there throws good trials
    away (on LCBench, epoch 1 ranks configurations no better than chance). With ``confidence`` above
    0.5 the correlation must reach the threshold at that one-sided confidence, not just on the few
    trials seen (Fisher's z with the Spearman variance 1.06 / (n - 3)). Returns the epoch and its
    correlation; the last epoch if none reaches the threshold.
    """
    last = max((max(t.intermediate_values, default=0) for t in complete), default=0)
    rho = 0.0
    for epoch in range(1, last + 1):
        pairs = [(t.intermediate_values[epoch], float(t.value)) for t in complete  # type: ignore[arg-type]
                 if epoch in t.intermediate_values and t.value is not None]  # fmt: skip
        if len(pairs) >= 3:
            rho = spearman(pairs)
            if _lower_bound(rho, len(pairs), confidence) >= threshold:
                return epoch, rho
    return max(last, 1), rho


def _lower_bound(rho: float, n: int, confidence: float) -> float:
    if confidence <= 0.5:
        return rho
    if n <= 3:
        return -1.0
    from statistics import NormalDist

    z = math.atanh(max(-0.9999, min(0.9999, rho))) - NormalDist().inv_cdf(confidence) * math.sqrt(1.06 / (n - 3))
    return math.tanh(z)


def _first_complete(study: optuna.Study, n: int) -> list[FrozenTrial] | None:
    """The ``n`` trials that completed first, the same set for every worker once it exists."""
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < n:
        return None
    complete.sort(key=lambda t: (t.datetime_complete or t.datetime_start, t.number))
    return complete[:n]


class AdaptiveSuccessiveHalving(optuna.pruners.BasePruner):
    """Successive halving whose first rung is where the study's own curves start to rank trials.

    Nothing is pruned until ``startup`` trials have completed; the first rung is then the first
    epoch whose values rank those trials (Spearman >= ``rho``) as their final values do, and the
    rungs follow at ``factor`` times it. The choice is made once, from the trials that completed
    first, so every worker makes the same one, and is recorded on the study (``hpsearch.first_rung``).
    A complete trial stands in every rung it passed, also those it passed before the rungs existed.
    """

    def __init__(self, factor: int, bootstrap: int, startup: int, rho: float, confidence: float = 0.5) -> None:
        self._factor, self._bootstrap, self._startup, self._rho = factor, bootstrap, startup, rho
        self._confidence = confidence
        self._min: int | None = None

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        from storage import is_promotable, study_storage, trial_id

        if self._min is None:
            first = _first_complete(study, self._startup)
            if first is None:
                return False
            self._min, rho = first_ranking_epoch(first, self._rho, self._confidence)
            _record_first_rung(study, self._min, rho, len(first))
        step = trial.last_step
        if step is None:
            return False
        value = trial.intermediate_values[step]
        rung = sum(1 for key in trial.system_attrs if key.startswith("completed_rung_"))
        trials: list[FrozenTrial] | None = None
        while True:
            rung_step = self._min * self._factor**rung
            if step < rung_step:
                return False
            if math.isnan(value):
                return True
            trials = trials if trials is not None else _LogicalTrials(study).get_trials(deepcopy=False)
            key = f"completed_rung_{rung}"
            study_storage(study).set_trial_system_attr(trial_id(trial), key, value)
            competing = [*_rung_values(trials, key, rung_step, trial.number), value]
            if len(competing) <= self._bootstrap:
                return True
            if not is_promotable(value, competing, self._factor, study.direction):
                return True
            rung += 1


def _rung_values(trials: list[FrozenTrial], key: str, step: int, exclude: int) -> list[float]:
    from optuna.trial import TrialState

    values = []
    for t in trials:
        if t.number == exclude:
            continue
        if key in t.system_attrs:
            values.append(float(t.system_attrs[key]))
        elif t.state == TrialState.COMPLETE and step in t.intermediate_values:
            values.append(float(t.intermediate_values[step]))
    return values


WARMUP_EVERY_TRIAL = 1000
"""Up to this many complete trials the median rule's warm-up is recomputed at each new one; past it,
once they have grown by 1% (ranking 100,000 curves at each decision took seconds)."""


class AdaptiveMedian(optuna.pruners.BasePruner):
    """The median rule, from the first epoch whose values rank the complete trials as their final values do.

    The warm-up follows the study: it is recomputed from every complete trial as they come in (past
    ``WARMUP_EVERY_TRIAL`` of them, each time they have grown by 1%).
    """

    def __init__(self, startup: int, rho: float, interval: int, min_trials: int, confidence: float = 0.5) -> None:
        self._startup, self._rho, self._interval, self._min_trials = startup, rho, interval, min_trials
        self._confidence = confidence
        self._seen = -1
        self._inner: optuna.pruners.MedianPruner | None = None  # an IndexedMedian

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        from optuna.trial import TrialState

        from search.settings._median_rule import IndexedMedian
        from storage import warmup_steps

        index = getattr(study, "complete_steps", None)  # a worker's: the count without a pass over the study
        complete = None if index is not None else study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        count = index.trials if index is not None else len(complete or ())
        if count < max(self._startup, 3):
            return False
        if count != self._seen and (count <= WARMUP_EVERY_TRIAL or count >= 1.01 * self._seen):
            self._seen = count
            if complete is None:
                complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            epoch, rho = first_ranking_epoch(complete, self._rho, self._confidence)
            if self._inner is None or warmup_steps(self._inner) != epoch:
                _record_first_rung(study, epoch, rho, count, update=True)
            self._inner = IndexedMedian(
                n_startup_trials=self._startup, n_warmup_steps=epoch, interval_steps=self._interval,
                n_min_trials=self._min_trials,
            )  # fmt: skip
        assert self._inner is not None
        return self._inner.prune(study, trial)


def _record_first_rung(study: optuna.Study, epoch: int, rho: float, trials: int, update: bool = False) -> None:
    from storage import study_id, study_storage

    try:
        attrs = study_storage(study).get_study_system_attrs(study_id(study))
        if update or FIRST_RUNG_ATTR not in attrs:
            study_storage(study).set_study_system_attr(
                study_id(study), FIRST_RUNG_ATTR, {"epoch": epoch, "spearman": round(rho, 3), "trials": trials}
            )
    except Exception:  # noqa: BLE001 - a record for people; pruning goes on without it
        pass
