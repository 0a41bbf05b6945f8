"""Experiment: pause the first wave's weak trials instead of pruning them, and let the default judge them later.

The wave experiment (``wave_pruner.py``) pruned a many-worker search's first wave from the running
trials' partial curves: it won early (less compute spent on poor random trials) and lost at the end
of the trial budget, its early cuts being for good. Here the same early signal *pauses* a trial: its
worker takes new work, the trial keeps its place in the trial budget (it is not finished) and stays
running for the sampler (the constant liar sees it). Once the default's median rule can decide
(``startup`` complete trials), a freed worker first takes the paused trials, best value first: the
default rule judges each at the epoch where it stopped, and prunes it there, or resumes it from that
epoch (as a retry resumes from its checkpoint). If the budget holds nothing but paused and running
trials before then, the best paused trial is resumed anyway.

What is left out: the cost of a pause and a resume (a checkpoint written and read; in the service, a
trial handed from one worker to another). Measured in docs/search-strategy.md; not part of the product.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import optuna
from optuna.trial import TrialState

from benchmarks.search_sim import Curve, Event, Problem, Strategy, Trace
from benchmarks.wave_pruner import WaveMedian


def paused_search(wave: int, factor: int = 3) -> Any:
    """A strategy's simulation: the default sampler and pruner, with the first wave paused as above."""

    def run(problem: Problem, strategy: Strategy, workers: int, seed: int, *, trials: int,
            epochs_budget: float = 0) -> Trace:  # fmt: skip
        from search.settings import SearchSettings, make_pruner, make_sampler
        from search.settings._pruners import AdaptiveMedian

        default = SearchSettings()
        pruner = make_pruner(default.pruner, problem.epochs)
        if not isinstance(pruner, AdaptiveMedian):  # so that the name keeps meaning what it measured
            raise SystemExit(f"{strategy.name} extends the default median:warmup=auto; it is now {default.pruner!r}")
        early = WaveMedian(pruner._startup, pruner._rho, wave=wave, factor=factor, confidence=pruner._confidence)
        study = optuna.create_study(study_name=problem.name, sampler=make_sampler(default.sampler, seed), pruner=pruner)
        return simulate_paused(problem, study, early, max(pruner._startup, 3), strategy.name, workers, seed,
                               trials=trials, epochs_budget=epochs_budget)  # fmt: skip

    return run


def simulate_paused(problem: Problem, study: optuna.Study, early: WaveMedian, startup: int, name: str,
                    workers: int, seed: int, *, trials: int, epochs_budget: float = 0,
                    log: list[tuple[str, int, int]] | None = None) -> Trace:  # fmt: skip
    """``search_sim.simulate`` with pauses: ``early`` (a wave rule, asked only while fewer than
    ``startup`` trials are complete) pauses a trial where it would prune it; ``study``'s pruner
    judges the paused trials once ``startup`` trials are complete. ``log`` gets ("pause" | "resume" |
    "prune", trial number, epoch) for each pause and what became of it."""
    log = [] if log is None else log
    space = problem.space()
    trace = Trace(name, problem.name, workers, seed)
    queue: list[tuple[float, int, Any, Curve, int]] = []
    paused: list[tuple[Any, Curve, int]] = []  # (trial, curve, epochs trained)
    counter = used = finished = complete = 0
    best = math.inf

    def push(when: float, trial: Any, curve: Curve, epoch: int) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(queue, (when, counter, trial, curve, epoch))

    def finish(now: float, trial: Any, curve: Curve, pruned: bool) -> None:
        nonlocal finished, complete, best
        finished += 1
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            complete += 1
            value = min(curve.values)
            study.tell(trial, value)
            trace.curves.append(curve.values)
            best = min(best, value)
        trace.events.append(Event(now, used, finished, best))

    def room() -> bool:
        """Whether the budget allows a new trial: paused trials keep their places in it."""
        return finished + len(queue) + len(paused) < trials or used < epochs_budget

    def take_work(now: float) -> None:
        """A worker is free: resume a paused trial if one may go on, else start a new one if the budget allows."""
        while paused:
            if complete < startup and room():
                break
            paused.sort(key=lambda p: min(p[1].values[: p[2]]))
            trial, curve, epoch = paused.pop(0)
            if complete >= startup and study.pruner.prune(study, study._storage.get_trial(trial._trial_id)):
                log.append(("prune", trial.number, epoch))
                finish(now, trial, curve, pruned=True)
                continue
            log.append(("resume", trial.number, epoch))
            push(now + curve.seconds[epoch], trial, curve, epoch + 1)
            return
        if room():
            trial = study.ask(space)
            curve = problem.curve(dict(trial.params))
            push(now + curve.seconds[0], trial, curve, 1)

    for _ in range(workers):
        take_work(0.0)
    while queue:
        now, _, trial, curve, epoch = heapq.heappop(queue)
        used += 1
        trial.report(curve.values[epoch - 1], epoch)
        if complete < startup:
            if epoch < problem.epochs and early.prune(study, study._storage.get_trial(trial._trial_id)):
                log.append(("pause", trial.number, epoch))
                paused.append((trial, curve, epoch))
                take_work(now)
                continue
            pruned = False
        else:
            pruned = trial.should_prune()
        if not pruned and epoch < problem.epochs:
            push(now + curve.seconds[epoch], trial, curve, epoch + 1)
            continue
        finish(now, trial, curve, pruned)
        take_work(now)
    return trace
