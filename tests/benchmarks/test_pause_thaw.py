"""The pause experiment (benchmarks/pause_thaw.py): weak first-wave trials paused, judged later, resumed or pruned."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from benchmarks.pause_thaw import paused_search, simulate_paused
from benchmarks.search_sim import Curve, Strategy
from benchmarks.wave_pruner import WaveMedian


class Ranked:
    """Curves that rank the trials by ``x`` at every epoch (smaller is better), one second per epoch."""

    name = "ranked"
    epochs = 9

    def space(self):
        return {"x": FloatDistribution(0.0, 1.0)}

    def curve(self, params):
        return Curve([(1.0 + params["x"]) / e for e in range(1, self.epochs + 1)], [1.0] * self.epochs)


class PruneAll(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True


def _run(pruner, *, workers, trials):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), pruner=pruner)
    log: list[tuple[str, int, int]] = []
    trace = simulate_paused(Ranked(), study, WaveMedian(5, 0.8, wave=10), 5, "pause", workers, 0, trials=trials,
                            log=log)  # fmt: skip
    return study, trace, log


def _steps(trial):
    return sorted(trial.intermediate_values)


def test_paused_trials_go_on_from_where_they_stopped_when_the_rule_keeps_them():
    study, trace, log = _run(optuna.pruners.NopPruner(), workers=12, trials=40)
    paused = {(n, e) for kind, n, e in log if kind == "pause"}
    assert paused, log  # the first wave's worse half was paused
    assert {(n, e) for kind, n, e in log if kind == "resume"} == paused  # each went on where it stopped
    assert all(kind != "prune" for kind, _, _ in log)
    assert len(study.trials) == 40 and all(t.state == TrialState.COMPLETE for t in study.trials)
    assert all(_steps(t) == list(range(1, 10)) for t in study.trials)  # no epoch trained twice or skipped
    assert trace.events[-1].epochs == 40 * 9 and [e.trials for e in trace.events] == list(range(1, 41))
    # Paused trials waited for 5 complete ones (there was room for new trials meanwhile).
    first_five = sorted(study.trials, key=lambda t: t.datetime_complete)[:5]
    assert not {t.number for t in first_five} & {n for n, _ in paused}


def test_paused_trials_the_rule_prunes_end_where_they_stopped():
    study, trace, log = _run(PruneAll(), workers=12, trials=40)
    pruned = {n: e for kind, n, e in log if kind == "prune"}
    assert pruned and not any(kind == "resume" for kind, _, _ in log)
    for number, epoch in pruned.items():
        trial = study.trials[number]
        assert trial.state == TrialState.PRUNED and _steps(trial) == list(range(1, epoch + 1))
    assert len(study.trials) == 40 and all(t.state.is_finished() for t in study.trials)
    assert trace.events[-1].trials == 40


def test_a_budget_full_of_paused_trials_resumes_them_before_the_rule_can_judge():
    study, trace, log = _run(PruneAll(), workers=12, trials=12)
    assert [e.trials for e in trace.events] == list(range(1, 13))
    assert all(t.state.is_finished() for t in study.trials) and len(study.trials) == 12
    resumed = [(n, e) for kind, n, e in log if kind == "resume"]
    assert resumed == [(n, e) for kind, n, e in log if kind == "pause"]  # at once: no room for a new trial


def test_the_strategy_runs_the_default_with_pauses():
    run = paused_search(10)
    trace = run(Ranked(), Strategy("pause10", run=run), 12, 0, trials=30)
    assert trace.strategy == "pause10" and trace.events[-1].trials == 30
