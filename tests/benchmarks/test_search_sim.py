"""The simulator behind the strategy choice: its clock, its accounting, and the adaptive first rung."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import optuna
import pytest
from optuna.distributions import FloatDistribution
from sim_helpers import ToyProblem

from benchmarks.search_sim import Curve, Strategy, epoch_rank_correlation, simulate, spearman, top_k_after_one_epoch
from search.settings import FIRST_RUNG_ATTR, make_pruner
from search.settings._pruners import first_ranking_epoch


class Toy(ToyProblem):
    """Curves that rank trials backwards at epoch 1 and rightly from epoch 2 on (the last epoch is the best)."""

    def curve(self, params):
        x = params["x"]
        return Curve([3.0 - x, 1.0 + x, 0.6 + x, 0.3 + x], [1.0, 1.0, 1.0, 1.0])


def test_the_clock_and_the_accounting_follow_the_workers():
    trace = simulate(Toy(), Strategy("random", "random", "none"), workers=2, seed=0, trials=6)
    assert [e.trials for e in trace.events] == [1, 2, 3, 4, 5, 6]
    assert [e.epochs for e in trace.events][-1] == 6 * 4
    # Two workers, 4 s per trial: trials end in pairs at 4, 8 and 12 s.
    assert [e.seconds for e in trace.events] == [4.0, 4.0, 8.0, 8.0, 12.0, 12.0]
    assert trace.best_at(trials=2) >= trace.best_at() and math.isinf(trace.best_at(seconds=3))
    assert trace.events[-1].best == min(min(c) for c in trace.curves)


class Uneven(Toy):
    """A trial with x > 0.5 spends 2 s on its first epoch, the others 1 s: epochs end together."""

    epochs = 3

    def curve(self, params):
        return Curve([1.0, 0.5, 0.25], [2.0 if params["x"] > 0.5 else 1.0, 1.0, 1.0])


def test_epochs_that_end_at_the_same_moment_are_taken_in_turn():
    """A new trial's first epoch and a running one's next can end at the same moment; the simulator
    failed there (it compared the trials) before each entry had its own tie-breaker."""

    def build(problem, seed):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        for x in (0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0):
            study.enqueue_trial({"x": x})
        return study

    trace = simulate(Uneven(), Strategy("fixed", build=build), workers=2, seed=0, trials=8)
    assert [e.seconds for e in trace.events] == [3.0, 4.0, 6.0, 7.0, 10.0, 10.0, 13.0, 14.0]
    assert trace.events[-1].epochs == 8 * 3


def test_the_top_k_baseline_counts_epochs_as_they_are_trained():
    trace = top_k_after_one_epoch(Toy(), workers=2, seed=0, trials=4, epochs_budget=16)
    # 4 first epochs on 2 workers (2 s), then each worker continues one config for 3 epochs: the first
    # complete trials end at 5 s, when 4 + 2 x 3 = 10 epochs have been trained (not 4 + 3).
    first = next(e for e in trace.events if e.trials == 1)
    assert first.seconds == 5.0 and first.epochs >= 9
    assert [e.epochs for e in trace.events] == list(range(1, len(trace.events) + 1))


def test_rank_correlation_per_epoch():
    curves = [Toy().curve({"x": x / 10}).values for x in range(10)]
    rho = epoch_rank_correlation(curves)
    assert rho[0] == -1.0 and rho[1] == rho[2] == rho[3] == 1.0
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0


def _complete(number: int, x: float) -> optuna.trial.FrozenTrial:
    values = Toy().curve({"x": x}).values
    start = datetime(2026, 1, 1) + timedelta(minutes=number)
    return optuna.trial.FrozenTrial(
        number=number, state=optuna.trial.TrialState.COMPLETE, value=min(values), datetime_start=start,
        datetime_complete=start + timedelta(seconds=30), params={"x": x}, distributions={"x": FloatDistribution(0, 1)},
        user_attrs={}, system_attrs={}, intermediate_values=dict(enumerate(values, start=1)), trial_id=number,
    )  # fmt: skip


def test_the_first_rung_is_the_first_epoch_that_ranks_trials():
    trials = [_complete(n, x / 7) for n, x in enumerate(range(8))]
    assert first_ranking_epoch(trials, 0.8) == (2, 1.0)


def _two_epochs(number: int, first: float, final: float) -> optuna.trial.FrozenTrial:
    trial = _complete(number, 0.5)
    trial.intermediate_values, trial.value = {1: first, 2: final}, final
    return trial


def test_with_confidence_a_few_trials_must_rank_more_clearly():
    # Epoch 1 ranks these five trials with Spearman 0.9 (two neighbours swapped), epoch 2 exactly.
    five = [_two_epochs(n, first, final) for n, (first, final) in enumerate([(2, 1), (1, 2), (3, 3), (4, 4), (5, 5)])]
    assert first_ranking_epoch(five, 0.8) == (1, 0.9)
    # 0.9 from five trials is not 0.8 at 80% confidence (its lower bound is about 0.70).
    assert first_ranking_epoch(five, 0.8, confidence=0.8) == (2, 1.0)
    # Forty trials ranked the same way at epoch 1 but for four swapped pairs are enough.
    forty = [_two_epochs(n, float(n ^ 1 if n < 8 else n), float(n)) for n in range(40)]
    assert first_ranking_epoch(forty, 0.8, confidence=0.8)[0] == 1
    assert make_pruner("median:warmup=auto,conf=0.8", 4)._confidence == 0.8


def test_adaptive_successive_halving_waits_then_prunes_from_the_ranking_epoch_and_says_so():
    study = optuna.create_study(pruner=make_pruner("successive-halving:min=auto,startup=5", Toy.epochs))
    xs = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.95]
    pruned_at = []
    for x in xs:
        study.enqueue_trial({"x": x})
        trial = study.ask({"x": FloatDistribution(0, 1)})
        values = Toy().curve({"x": x}).values
        stop = None
        for epoch, value in enumerate(values, start=1):
            trial.report(value, epoch)
            if trial.should_prune():
                stop = epoch
                break
        pruned_at.append(stop)
        if stop is None:
            study.tell(trial, min(values))
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert pruned_at[:5] == [None] * 5  # nothing is pruned before 5 trials have completed
    # Then a rung at epoch 2 (the first that ranks), where the complete trials stand too: 0.2 is in
    # their best third there, 0.8 and 0.95 are not.
    assert pruned_at[5:] == [None, 2, 2]
    assert study._storage.get_study_system_attrs(study._study_id)[FIRST_RUNG_ATTR] == {
        "epoch": 2,
        "spearman": 1.0,
        "trials": 5,
    }


def test_the_dehb_baseline_counts_every_epoch_it_trains_and_only_full_trainings_as_complete():
    pytest.importorskip("dehb")
    from benchmarks.dehb_baseline import dehb_search

    class Long(Toy):
        epochs = 9  # DEHB's fidelities from 1 to 9 with eta=3: 1, 3 and 9 epochs

        def curve(self, params):
            x = params["x"]
            return Curve([3.0 - x] + [1.0 + x - e / 10 for e in range(8)], [1.0] * 9)

    trace = dehb_search(Long(), workers=3, seed=0, epochs_budget=60)
    assert [e.trials for e in trace.events] == list(range(1, len(trace.events) + 1))
    epochs = [e.epochs for e in trace.events]
    assert epochs == sorted(epochs) and epochs[-1] >= 60
    # Epochs are counted as trained: 3 workers always busy at 1 s per epoch have trained 3 t epochs by
    # t seconds, those of jobs still running included.
    assert all(3 * (e.seconds - 1) < e.epochs <= 3 * e.seconds for e in trace.events)
    # Only 9-epoch jobs are complete trials, and the best is the best of their values.
    assert trace.curves and all(len(c) == 9 for c in trace.curves)
    assert trace.events[-1].best == min(min(c) for c in trace.curves)
    assert math.isinf(trace.events[0].best)  # the first jobs to end are the 1-epoch ones
    # The same seed asks for the same configurations.
    again = dehb_search(Long(), workers=3, seed=0, epochs_budget=60)
    assert [vars(e) for e in again.events] == [vars(e) for e in trace.events]


class Flat(Toy):
    """Best at epoch 2 for every trial, worse at 3 and 4, better again at 5, then flat."""

    epochs = 6

    def curve(self, params):
        x = params["x"]
        return Curve([1.0 + x, 0.5 + x, 0.6 + x, 0.7 + x, 0.4 + x, 0.4 + x], [1.0] * 6)


@pytest.mark.parametrize(("patience", "epochs", "best_of"), [("2", 4, 2), ("3", 6, 5), ("off", 6, 5)])
def test_patience_ends_a_trial_complete_with_its_best_value_so_far(patience, epochs, best_of):
    """As ``search start --patience``: patience 2 ends each trial after epoch 4 with epoch 2's value;
    patience 3 reaches epoch 5's better value and, flat after it, the last epoch."""
    trace = simulate(Flat(), Strategy("p", "random", "none", patience=patience), workers=1, seed=0, trials=3)
    assert [e.epochs for e in trace.events] == [epochs, 2 * epochs, 3 * epochs]
    assert all(len(c) == 6 for c in trace.curves)  # the problem's whole curves, for rank correlations
    assert trace.events[-1].best == min(c[best_of - 1] for c in trace.curves)


def test_rank_correlation_per_epoch_over_the_curves_that_reached_it():
    curves = [[3.0, 1.0], [2.0, 2.0], [1.0, 3.0], [5.0]]  # the last one ended after epoch 1
    rho = epoch_rank_correlation(curves)
    assert rho == [spearman([3.0, 2.0, 1.0, 5.0], [1.0, 2.0, 1.0, 5.0]), spearman([1.0, 2.0, 3.0], [1.0, 2.0, 1.0])]
    assert rho == pytest.approx([0.4, 0.5])
    assert math.isnan(epoch_rank_correlation([[1.0, 2.0], [2.0], [3.0]])[1])  # one curve reached epoch 2


def test_patience_with_spare_lets_the_trials_in_contention_run_to_their_end():
    """Every trial of ``Flat`` stalls after epoch 4; with spare=1 a trial at least as good as the
    worst complete one runs on to epoch 6 (and its better epoch 5), the first (no complete trial yet)
    and any worse one ends at epoch 4."""
    strategy = Strategy("p", "random", "none", patience="2", spare=1.0)
    trace = simulate(Flat(), strategy, workers=1, seed=0, trials=6)
    plain = simulate(Flat(), Strategy("p", "random", "none", patience="2"), workers=1, seed=0, trials=6)
    assert [e.epochs for e in plain.events] == [4 * n for n in range(1, 7)]
    lengths = [b.epochs - a.epochs for a, b in zip([*trace.events[:1], *trace.events], trace.events, strict=False)]
    lengths[0] = trace.events[0].epochs
    assert lengths[0] == 4 and 6 in lengths[1:]
    xs = [c[0] - 1.0 for c in trace.curves]
    for n in range(1, 6):  # the trial ran to its end exactly when it was at least as good as the worst complete one
        assert lengths[n] == (6 if xs[n] <= max(xs[:n]) else 4)


def test_auto_samples_as_search_start_resolves_it():
    """The benchmarks' ``default`` is ``--sampler auto``: ``gp:until=100`` with 2 workers, tpe with 8
    (both sample at random until 10 trials are complete: with 8 workers, 16 are by trial 17)."""

    def curves(sampler: str, workers: int) -> list:
        trace = simulate(Toy(), Strategy(sampler, sampler, "none"), workers=workers, seed=0, trials=24)
        return [list(c) for c in trace.curves]

    # auto resolves to gp:until=100; a Toy run of 24 trials is gp's alone, as a hand-off at 14 is gp's
    # up to there and its own after.
    assert curves("auto", 2) == curves("gp", 2) != curves("tpe", 2)
    handed = curves("gp:until=14", 2)
    assert handed[:14] == curves("gp", 2)[:14] and handed != curves("gp", 2)
    assert curves("auto", 8) == curves("tpe", 8) != curves("gp", 8)
