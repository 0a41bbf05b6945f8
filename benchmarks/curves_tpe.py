"""An experiment, not a product option: TPE that also learns from the curves of running trials.

With W workers, TPE learns nothing until trials finish: its first ``startup`` trials are random,
and the constant liar counts every running trial as bad. With many workers and long trainings the
first wave runs for a full training before the search learns anything, and every trial started in
the meantime is random too: that is most of the quality parallel workers lose per epoch.

Here the running trials that have reported are seen as Optuna sees pruned ones, at a common epoch
(as BOHB models the largest budget with enough observations): the epoch that half of them (and at
least two) have reached; each is ranked by its value there. Those not that far yet stay running
(the liar's "bad"). Complete trials still rank first, so once enough have finished, running ones
only ever fill the bad side, as with the liar alone. With one worker nothing changes.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial


def as_partial(trials: Sequence[FrozenTrial], min_epoch: int = 1) -> list[FrozenTrial]:
    """``trials``, with each running trial that reached the common epoch shown as a trial pruned
    there (its curve cut at that epoch); the others as they are. A common epoch below
    ``min_epoch`` is not used (early epochs may not rank trials at all)."""
    running = [t for t in trials if t.state == TrialState.RUNNING and t.intermediate_values]
    if len(running) < 2:
        return list(trials)
    reached = sorted((max(t.intermediate_values) for t in running), reverse=True)
    epoch = reached[max(2, (len(running) + 1) // 2) - 1]
    if epoch < min_epoch:
        return list(trials)
    shown = []
    for trial in trials:
        if trial.state == TrialState.RUNNING and epoch in trial.intermediate_values:
            trial = copy.copy(trial)
            trial.state = TrialState.PRUNED
            trial.intermediate_values = {k: v for k, v in trial.intermediate_values.items() if k <= epoch}
        shown.append(trial)
    return shown


class _CurvesView:
    """The study as the sampler sees it: running trials as :func:`as_partial` shows them."""

    def __init__(self, study: Study, min_epoch: int) -> None:
        self._study = study
        self._min_epoch = min_epoch

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:  # fmt: skip
        trials = self._study._get_trials(deepcopy=False, states=None, use_cache=use_cache)
        trials = as_partial(trials, self._min_epoch)
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


class CurvesTPESampler(optuna.samplers.TPESampler):
    """:class:`optuna.samplers.TPESampler` that ranks running trials by their curves (module doc)."""

    def __init__(self, *, min_epoch: int = 1, **tpe: Any) -> None:
        super().__init__(**tpe)
        self._min_epoch = min_epoch

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:  # fmt: skip
        return super().sample_relative(_CurvesView(study, self._min_epoch), trial, search_space)  # type: ignore[arg-type]

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:  # fmt: skip
        view = _CurvesView(study, self._min_epoch)
        return super().sample_independent(view, trial, param_name, param_distribution)  # type: ignore[arg-type]


def curves_study(min_fraction: float) -> Any:
    """A strategy's study builder: the default strategy with :class:`CurvesTPESampler` in place of
    its per-parameter TPE (same options; the joint model it takes alone is left out); the common
    epoch at least ``min_fraction`` of the problem's epochs."""
    from search.settings import SearchSettings, make_pruner, parse_spec
    from search.settings._algorithms import SAMPLER_OPTIONS

    default = SearchSettings()
    name, opts = parse_spec(default.sampler, "sampler", SAMPLER_OPTIONS)

    def build(problem: Any, seed: int) -> optuna.Study:
        # Checked when the experiment runs, not when the table of strategies is built for another.
        # The default's model beside running trials (multivariate=auto) is the per-parameter one.
        if name != "tpe" or opts["multivariate"] is True:
            raise SystemExit(f"tpe-curves wraps the default per-parameter TPE; the default is now {default.sampler!r}")
        sampler = CurvesTPESampler(
            min_epoch=max(1, int(min_fraction * problem.epochs)), seed=seed, n_startup_trials=opts["startup"],
            constant_liar=opts["liar"], n_ei_candidates=opts["candidates"], multivariate=False,
        )  # fmt: skip
        return optuna.create_study(study_name=problem.name, sampler=sampler,
                                   pruner=make_pruner(default.pruner, problem.epochs))  # fmt: skip

    return build
