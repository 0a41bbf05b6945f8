"""``tpe:stopped``: a trial ``--patience`` ended is read by TPE at the final value its curve ranked it
at when it stopped, among the complete trials that ran to their end, where that epoch ranks them."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from search.settings import make_sampler, parse_sampler
from search.settings._believer import Seen, project

DIST = {"x": optuna.distributions.FloatDistribution(0, 1)}
FINALS = [0.1, 0.2, 0.3, 0.4]


def _trial(number: int, curve: dict[int, float], value: float, stopped: bool = False):  # noqa: ANN202
    attrs = {"stopped_epoch": max(curve)} if stopped else {}  # as the service marks a trial --patience ended
    trial = optuna.trial.create_trial(params={"x": number / 100}, distributions=DIST, value=value,
                                      intermediate_values=curve, user_attrs=attrs)  # fmt: skip
    trial.number = number
    return trial


def _full(finals: list[float], ranked: bool = True) -> list:
    """Complete trials of 3 epochs whose epoch-2 values rank them as their finals do (or in reverse)."""
    if ranked:
        return [_trial(i, {1: f + 1.0, 2: f + 0.5, 3: f}, f) for i, f in enumerate(finals)]
    return [_trial(i, {1: 9.5 - f, 2: 9.0 - f, 3: f}, f) for i, f in enumerate(finals)]


def test_a_stopped_trial_is_read_at_the_final_value_of_its_rank():
    stopped = _trial(4, {1: 1.15, 2: 0.62}, 0.62, stopped=True)  # second of five at epoch 2
    shown = project([*_full(FINALS), stopped], minimize=True, rho=0.8)
    assert shown[-1].value == 0.2 and shown[-1].state == TrialState.COMPLETE
    assert stopped.value == 0.62  # a copy is shown, the study's trial is untouched
    assert [t.number for t in shown] == list(range(5))
    assert [t.value for t in shown[:4]] == FINALS  # the others as they are


def test_only_trials_that_ran_to_their_end_rank_it():
    # Another stopped trial, best of all at epoch 2, is no reference: the rank is among the four.
    first = _trial(5, {1: 1.0, 2: 0.52}, 0.52, stopped=True)
    stopped = _trial(4, {1: 1.15, 2: 0.62}, 0.62, stopped=True)
    shown = {t.number: t.value for t in project([*_full(FINALS), stopped, first], True, 0.8)}
    assert (shown[4], shown[5]) == (0.2, 0.1)


def test_nothing_is_projected_where_the_epoch_does_not_rank_too_few_ran_or_it_would_look_worse():
    stopped = _trial(4, {1: 1.15, 2: 0.62}, 0.62, stopped=True)
    for trials in ([*_full(FINALS, ranked=False), stopped], [*_full(FINALS[:2]), stopped]):
        assert project(trials, True, 0.8) is trials
    already = _trial(4, {1: 1.0, 2: 0.05}, 0.05, stopped=True)  # better than every final already
    trials = [*_full(FINALS), already]
    assert project(trials, True, 0.8) is trials
    unmarked = [*_full(FINALS), _trial(4, {1: 1.15, 2: 0.62}, 0.62)]  # ran as far as it was meant to
    assert project(unmarked, True, 0.8) is unmarked


def test_maximizing_and_constraints():
    from storage import constraint_key

    full = [_trial(i, {1: f - 1.0, 2: f - 0.5, 3: f}, f) for i, f in enumerate(FINALS)]
    stopped = _trial(4, {1: -0.65, 2: -0.12}, -0.12, stopped=True)  # second best of five at epoch 2
    assert project([*full, stopped], False, 0.8)[-1].value == 0.3
    full[0].system_attrs[constraint_key("latency_ms")] = -1.0  # its end's constraints are not known
    trials = [*full, stopped]
    assert project(trials, False, 0.8) is trials


def test_what_one_read_keeps_does_not_change_what_is_shown():
    seen = Seen()
    stopped = _trial(4, {1: 1.15, 2: 0.62}, 0.62, stopped=True)
    assert project([*_full(FINALS), stopped], True, 0.8, seen)[-1].value == 0.2
    # One more trial run to its end, second at epoch 2 and at the end: the stopped one ranks second
    # of five at epoch 2 now, and reads as the second final of five.
    more = [*_full(FINALS), stopped, _trial(5, {1: 1.0, 2: 0.65, 3: 0.15}, 0.15)]
    assert project(more, True, 0.8, seen)[4].value == project(more, True, 0.8)[4].value == 0.15
    assert sorted(seen.stopped) == [4]


def _search(sampler_text: str, stop: bool, n: int = 30) -> list[float]:
    """One worker: trials asked one at a time, each ended after 3 epochs, or with ``stop`` those
    within 0.5 of the best x at epoch 2 by --patience (marked as the service marks them)."""
    study = optuna.create_study(sampler=make_sampler(sampler_text, seed=3))
    xs = []
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_float("x", -3, 3)
        xs.append(x)
        curve = {1: (x - 1) ** 2 + 1, 2: (x - 1) ** 2 + 0.5, 3: (x - 1) ** 2}
        ended = stop and abs(x - 1) < 0.5
        for epoch in (1, 2) if ended else (1, 2, 3):
            trial.report(curve[epoch], epoch)
        if ended:
            trial.set_user_attr("stopped_epoch", 2)
        study.tell(trial, min(curve[e] for e in ((1, 2) if ended else (1, 2, 3))))
    return xs


def test_one_worker_samples_as_tpe_does_until_a_trial_is_stopped():
    assert _search("tpe", stop=False) == _search("tpe:stopped=false", stop=False)
    assert (
        _search("tpe", stop=True) == _search("tpe:stopped=true", stop=True) != _search("tpe:stopped=false", stop=True)
    )
    assert _search("tpe:stopped=false", stop=True) == _search("tpe:believe=0,stopped=false", stop=True)


@pytest.mark.parametrize(("stopped", "running", "projected"),
                         [("auto", 0, True), ("auto", 1, False), (True, 3, True), (False, 0, False)])  # fmt: skip
def test_auto_reads_stopped_trials_while_no_other_runs(stopped, running, projected):
    from search.settings._believer import Believer

    trials = [*_full(FINALS), _trial(4, {1: 1.15, 2: 0.62}, 0.62, stopped=True)]
    for number in range(5, 5 + running):  # running, nothing reported: none is believed
        trials.append(optuna.trial.create_trial(params={"x": 0.5}, distributions=DIST, state=TrialState.RUNNING))
        trials[-1].number = number
    believer = Believer(optuna.samplers.TPESampler(), beside=3, stopped=stopped)
    assert believer._shown(trials, 99, minimize=True)[4].value == (0.2 if projected else 0.62)


def test_the_spec_says_so():
    assert "trials --patience ended read at their curve's rank while no other runs" in parse_sampler("tpe").describe()
    assert "rank," in parse_sampler("tpe:stopped=true").describe()
    assert "while no other runs" in parse_sampler("tpe:believe=0").describe()
    assert "--patience" not in parse_sampler("tpe:stopped=false").describe()
    with pytest.raises(Exception, match="stopped"):
        parse_sampler("tpe:stopped=maybe")
