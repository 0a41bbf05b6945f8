"""Asynchronous workers over known learning curves, simulated in one process in simulated time.

Why: choosing a default strategy needs hundreds of searches (strategies x problems x seeds x worker
counts); through `search start` each would take minutes. Here every strategy uses the very sampler
and pruner objects the service builds (`search.settings.make_sampler`/`make_pruner`), and W workers
are simulated event by event: a worker asks for a trial the moment it frees up, so the sampler sees
exactly the trials a real worker would (finished ones, and running ones for the constant liar);
each epoch's value is reported, and the pruner asked, at the simulated moment that epoch ends.
What it leaves out is the service's own latency, which `bench_search.py --mode service` measures.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class Curve:
    values: list[float]
    """The metric after each epoch (to minimize)."""
    seconds: list[float]
    """How long each epoch takes."""


class Problem(Protocol):
    name: str
    epochs: int

    def space(self) -> dict[str, BaseDistribution]: ...

    def curve(self, params: dict[str, Any]) -> Curve: ...


@dataclass(frozen=True)
class Strategy:
    name: str
    sampler: str = "tpe"
    pruner: str = "none"
    build: Callable[[Problem, int], optuna.Study] | None = None
    """A study built another way (the plain script's sampler and pruner); None: from the specs."""
    sequential: bool = False
    """Always one worker, whatever the run's worker count (the sequential script)."""
    patience: str = "off"
    """``--patience``: end a trial as complete once its value has not improved for this many epochs."""
    thaw: float = 0.0
    """Once the trial budget is spent, continue to their last epoch the trials ``--patience`` ended
    whose value is in this top fraction of the complete trials (best first), instead of starting new
    trials: the compute patience saved, spent on the trials most likely to hold the best model."""
    spare: float = 0.0
    """``--patience`` never ends a trial whose best value so far is within this top fraction of the
    complete trials' values (0: it spares none): a flat trial that may still hold the best model
    runs on; the compute is saved only on flat trials out of contention."""


@dataclass
class Event:
    """One finished trial: when, after how many epochs in all, and the best complete value then."""

    seconds: float
    epochs: int
    trials: int
    best: float


@dataclass
class Trace:
    strategy: str
    problem: str
    workers: int
    seed: int
    events: list[Event] = field(default_factory=list)
    curves: list[list[float]] = field(default_factory=list)
    """Every complete trial's curve (for rank correlations)."""
    resumes: int = 0
    """Paused trials resumed (each charged ``resume_cost``)."""

    def best_at(self, *, epochs: float = math.inf, seconds: float = math.inf, trials: float = math.inf) -> float:
        """Best complete value once the search has used at most this many epochs, seconds and trials."""
        best = math.inf
        for event in self.events:
            if event.epochs > epochs or event.seconds > seconds or event.trials > trials:
                break
            best = event.best
        return best

    def cost_to_reach(self, target: float) -> tuple[float, float]:
        """Epochs and seconds at which the best value first reached ``target`` (inf, inf if never)."""
        for event in self.events:
            if event.best <= target:
                return event.epochs, event.seconds
        return math.inf, math.inf


def _study(problem: Problem, strategy: Strategy, seed: int, workers: int) -> optuna.Study:
    from search.settings import make_pruner, make_sampler, resolve_sampler

    if strategy.build is not None:
        return strategy.build(problem, seed)
    sampler = resolve_sampler(strategy.sampler, workers)[0]  # auto: as `search start` resolves it
    return optuna.create_study(
        study_name=problem.name, sampler=make_sampler(sampler, seed),
        pruner=make_pruner(strategy.pruner, problem.epochs),
    )  # fmt: skip


def simulate(problem: Problem, strategy: Strategy, workers: int, seed: int, *, trials: int,
             epochs_budget: float = 0, pause_cost: float = 0.0, resume_cost: float = 0.0) -> Trace:  # fmt: skip
    """Run until ``trials`` trials have finished and ``epochs_budget`` epochs have been trained.

    A pruner that pauses (freeze-thaw, ``search.settings.pausing_spec``) ends a trial as PRUNED at
    a rung, as the service does, and a worker that frees up resumes the paused trial the pruner's
    class names before it starts a new one, as the service's claim does: the resumption is a new
    Optuna trial carrying the paused one's params, values and number (``failed_trial``), which goes
    on from the epoch after the pause. A worker with nothing to do waits for the next event.

    What a pause and a resumption cost, in that trial's own epochs (``seconds`` of the epoch it
    paused after, or of the epoch it resumes into): ``pause_cost`` keeps the pausing worker busy
    (the rung's checkpoint written, the attempt ended) before it asks for work; ``resume_cost`` is
    added before the resumed trial's first epoch (claim, model build, checkpoint read). Both 0 by
    default: the traces of the records before 2026-11-28's speed-up run.
    """
    from search.settings import epochs_since_best, pausing_spec, resolve_patience
    from search.settings._freeze_thaw import BUDGET_ATTR

    workers = 1 if strategy.sequential else workers
    study = _study(problem, strategy, seed, workers)
    patience = resolve_patience(strategy.patience, problem.epochs)
    pausing = pausing_spec(study.pruner)
    space = problem.space()
    trace = Trace(strategy.name, problem.name, workers, seed)
    queue: list[tuple[float, int, Any, Curve, int]] = []
    paused: dict[int, tuple[optuna.trial.FrozenTrial, Curve, int]] = {}  # logical number -> trial, curve, epoch
    logical: dict[int, int] = {}  # number of a resumption -> its logical trial's
    counter = 0
    used = finished = started = idle = 0
    best = math.inf
    stopped: dict[int, tuple[Curve, int]] = {}  # number -> curve, last epoch: ended by --patience
    thawed: set[int] = set()  # trial numbers being continued after the budget (not Optuna trials)

    def push(now: float, trial: Any, curve: Curve, epoch: int, delay: float = 0.0) -> None:
        nonlocal counter
        counter += 1  # a fresh tie-breaker: the trials themselves do not compare
        heapq.heappush(queue, (now + delay + curve.seconds[epoch - 1], counter, trial, curve, epoch))

    def free_at(when: float) -> None:
        """A worker frees up at ``when`` (an entry with no trial)."""
        nonlocal counter
        counter += 1
        heapq.heappush(queue, (when, counter, None, None, 0))

    def resume(now: float) -> bool:
        from search.settings._freeze_thaw import logical_values

        if not paused:
            return False
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        values = logical_values(study.get_trials(deepcopy=False, states=states))
        spent = started >= trials and used >= epochs_budget  # no new trial starts: as the service's claim
        number = pausing.to_resume(study.pruner, values, {n: e for n, (_, _, e) in paused.items()}, False, spent)
        if number is None:
            return False
        frozen, curve, epoch = paused.pop(number)
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.WAITING, params=frozen.params, distributions=frozen.distributions,
            intermediate_values=frozen.intermediate_values, system_attrs={"failed_trial": number},
        ))  # fmt: skip
        trial = study.ask(space)
        logical[trial.number] = number
        trace.resumes += 1
        push(now, trial, curve, epoch + 1, delay=resume_cost * curve.seconds[epoch])
        return True

    def thaw(now: float) -> bool:
        """Continue the best trial --patience ended, if it is in the top ``strategy.thaw`` fraction."""
        if not stopped:
            return False
        values = sorted(t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        cutoff = values[min(len(values), max(1, math.ceil(strategy.thaw * len(values)))) - 1]
        number = min(stopped, key=lambda n: min(stopped[n][0].values[: stopped[n][1]]))
        curve, epoch = stopped.pop(number)
        if min(curve.values[:epoch]) > cutoff:
            stopped.clear()  # the best of them is outside the top: so are the rest
            return False
        thawed.add(number)
        push(now, number, curve, epoch + 1)
        return True

    def in_contention(value: float) -> bool:
        """Within the top ``strategy.spare`` fraction of the complete trials (none complete: no)."""
        values = sorted(t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        return bool(values) and value <= values[min(len(values), max(1, math.ceil(strategy.spare * len(values)))) - 1]

    def start(now: float) -> bool:
        nonlocal started
        if pausing is not None and resume(now):
            return True
        if strategy.thaw and started >= trials:
            return thaw(now)
        if started >= trials and used >= epochs_budget:
            return False
        trial = study.ask(space)
        started += 1
        push(now, trial, problem.curve(dict(trial.params)), 1)
        return True

    for _ in range(workers):
        start(0.0)
    while queue:
        now, _, trial, curve, epoch = heapq.heappop(queue)
        if trial is None:  # a worker done pausing a trial
            idle += 1
            while idle and start(now):
                idle -= 1
            continue
        used += 1
        if isinstance(trial, int) and trial in thawed:  # a continuation after the budget: no pruner
            if epoch < problem.epochs:
                push(now, trial, curve, epoch + 1)
                continue
            best = min(best, min(curve.values))
            trace.events.append(Event(now, used, finished, best))
            idle += 1
            while idle and start(now):
                idle -= 1
            continue
        trial.report(curve.values[epoch - 1], epoch)
        if pausing is not None and started >= trials and used >= epochs_budget and BUDGET_ATTR not in study.user_attrs:
            study.set_user_attr(BUDGET_ATTR, started)  # no new trial starts: what the pruner reads, as in the service
        pruned = trial.should_prune()
        stalled = patience and epochs_since_best(dict(enumerate(curve.values[:epoch], start=1)), epoch) >= patience
        if stalled and strategy.spare:
            stalled = not in_contention(min(curve.values[:epoch]))
        if not pruned and epoch < problem.epochs and not stalled:
            push(now, trial, curve, epoch + 1)
            if idle and pausing is not None and epoch in study.pruner.rungs:  # a rung filled: one may resume
                while idle and resume(now):
                    idle -= 1
            continue
        number = logical.get(trial.number, trial.number)
        resumed = number != trial.number  # counted as finished when it paused
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
            if pausing is not None:
                paused[number] = (study.trials[trial.number], curve, epoch)
        else:
            value = min(curve.values[:epoch])
            study.tell(trial, value)
            if stalled and strategy.thaw:
                stopped[trial.number] = (curve, epoch)
            trace.curves.append(curve.values)  # the problem's whole curve, for its rank correlations
            best = min(best, value)
        if not resumed:
            finished += 1
        trace.events.append(Event(now, used, finished, best))
        if pruned and pausing is not None and pause_cost > 0:
            free_at(now + pause_cost * curve.seconds[epoch - 1])
            continue
        idle += 1
        while idle and start(now):
            idle -= 1
    return trace


def top_k_after_one_epoch(problem: Problem, workers: int, seed: int, *, trials: int, epochs_budget: float) -> Trace:
    """Train ``trials`` random configs for one epoch, then continue them to the end, best first.

    The 'one epoch is all you need' baseline (arXiv 2307.15422): a config's full training is
    paid only once every config has shown its first epoch, in the order those epochs rank them.
    """
    sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=sampler)
    space = problem.space()
    configs = [study.ask(space).params for _ in range(trials)]
    curves = [problem.curve(dict(c)) for c in configs]
    order = sorted(range(trials), key=lambda i: curves[i].values[0])
    jobs: list[tuple[int, int, int]] = [(i, 1, 1) for i in range(trials)]  # (config, first epoch, last epoch)
    jobs += [(i, 2, problem.epochs) for i in order]
    trace = Trace("top-k after 1 epoch", problem.name, workers, seed)
    free = [0.0] * workers
    # One entry per epoch trained, at the moment it ends, so the epochs a search has spent are
    # counted as they are trained (a job's are not all counted at its end).
    ends: list[tuple[float, int]] = []  # (time, config if that epoch completes it else -1)
    for config, first, last in jobs:
        w = min(range(workers), key=free.__getitem__)
        for epoch in range(first, last + 1):
            free[w] += curves[config].seconds[epoch - 1]
            ends.append((free[w], config if epoch == problem.epochs else -1))
    done = 0
    best = math.inf
    for used, (when, config) in enumerate(sorted(ends), start=1):
        if config >= 0:
            done += 1
            best = min(best, min(curves[config].values))
            trace.curves.append(curves[config].values)
        trace.events.append(Event(when, used, done, best))
        if used >= epochs_budget and done >= 1:
            break
    return trace


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The adaptive pruners' own rank correlation (NaN below three points)."""
    from search.settings._pruners import spearman as pairs_spearman

    return pairs_spearman(list(zip(xs, ys, strict=True))) if len(xs) >= 3 else math.nan


def epoch_rank_correlation(curves: list[list[float]]) -> list[float]:
    """Per epoch: Spearman correlation of that epoch's values with the curves' final best values, over
    the curves that reached it (NaN where fewer than 3 did: a trial may end early, ``--patience``)."""
    out = []
    for epoch in range(max((len(c) for c in curves), default=0)):
        reached = [c for c in curves if len(c) > epoch]
        out.append(spearman([c[epoch] for c in reached], [min(c) for c in reached]) if len(reached) >= 3 else math.nan)
    return out
