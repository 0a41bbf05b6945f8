"""`gp` reads pruned trials as complete at the worst complete value (``pruned=true``, the default)."""

from __future__ import annotations

import copy

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from search.settings import make_sampler
from search.settings._pruned_seen import PrunedAsWorst, pruned_as_worst

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def _study(direction: str = "minimize", **kwargs: object) -> optuna.Study:
    study = optuna.create_study(direction=direction, **kwargs)  # type: ignore[arg-type]
    for x, value in ((0.1, 3.0), (0.2, 5.0), (0.3, 4.0)):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=SPACE, value=value))
    study.add_trial(optuna.trial.create_trial(params={"x": 0.9}, distributions=SPACE, state=TrialState.PRUNED,
                                              intermediate_values={1: 1.0}))  # fmt: skip
    study.add_trial(optuna.trial.create_trial(params={"x": 0.8}, distributions=SPACE, state=TrialState.PRUNED))
    return study


def test_a_pruned_trial_reads_as_complete_at_the_worst_value_and_the_stored_one_is_untouched():
    study = _study()
    seen = PrunedAsWorst(optuna.samplers.RandomSampler()).seen(study, None)
    complete = seen._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    # The pruned trial with a value reads as the worst (5.0, minimizing), not as its own 1.0; the one
    # pruned before it reported anything stays pruned.
    assert [(t.params["x"], t.value) for t in complete] == [(0.1, 3.0), (0.2, 5.0), (0.3, 4.0), (0.9, 5.0)]
    assert [t.state for t in study.trials[3:]] == [TrialState.PRUNED, TrialState.PRUNED]
    assert study.trials[3].value is None and study.trials[3].intermediate_values == {1: 1.0}


def test_maximizing_the_worst_is_the_lowest():
    seen = pruned_as_worst(_study("maximize").trials, maximize=True)
    assert [t.value for t in seen if t.state == TrialState.COMPLETE] == [3.0, 5.0, 4.0, 3.0]


def test_nothing_changes_without_a_complete_trial_or_with_constraints_or_several_objectives():
    pruned = optuna.trial.create_trial(params={"x": 0.9}, distributions=SPACE, state=TrialState.PRUNED,
                                       intermediate_values={1: 1.0})  # fmt: skip
    assert pruned_as_worst([pruned], maximize=False) == [pruned]
    study = _study()
    constrained = [*study.trials]
    constrained[0] = optuna.trial.create_trial(params={"x": 0.1}, distributions=SPACE, value=3.0,
                                               system_attrs={"constraints": [0.5]})  # fmt: skip
    assert pruned_as_worst(constrained, maximize=False) == constrained
    several = optuna.create_study(directions=["minimize", "minimize"])
    assert PrunedAsWorst(optuna.samplers.RandomSampler()).seen(several, None) is several


def test_gp_reads_pruned_trials_by_default_and_pruned_false_is_optunas_own():
    assert isinstance(make_sampler("gp", seed=1), PrunedAsWorst)
    assert make_sampler("gp:startup=4", seed=1)._n_startup_trials == 4
    assert isinstance(make_sampler("gp:pruned=false", seed=1), optuna.samplers.GPSampler)


def test_gp_stays_away_from_where_trials_were_pruned():
    # Every trial above x = 0.5 was pruned at a low intermediate value: Optuna's GP, blind to them,
    # keeps sampling there (the complete trials' values fall toward 0.5); shown them as the worst,
    # it samples below.
    def suggestions(spec: str) -> list[float]:
        study = optuna.create_study(sampler=make_sampler(spec, seed=0))
        for i in range(12):
            x = i / 11
            if x > 0.5:
                pruned = optuna.trial.create_trial(params={"x": x}, distributions=SPACE, state=TrialState.PRUNED,
                                                   intermediate_values={1: 0.0})  # fmt: skip
                study.add_trial(pruned)
            else:
                study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=SPACE, value=1.0 - x))
        return [study.ask(SPACE).params["x"] for _ in range(5)]

    blind, seeing = suggestions("gp:startup=3,pruned=false"), suggestions("gp:startup=3")
    assert all(x > 0.5 for x in blind), blind
    assert all(x < 0.5 for x in seeing), seeing


def test_an_attempt_that_goes_on_and_a_pruned_trial_missing_a_shared_parameter_stay_as_they_are():
    study = _study()
    # A paused trial's continuation names it last in its retry history: the paused attempt is no bad point.
    study.add_trial(optuna.trial.create_trial(params={"x": 0.9}, distributions=SPACE, value=2.0,
                                              system_attrs={"retry_history": [3]}))  # fmt: skip
    seen = pruned_as_worst(study.trials, maximize=False)
    assert seen[3].state == TrialState.PRUNED
    other = optuna.trial.create_trial(params={"z": 0.5}, distributions={"z": FloatDistribution(0.0, 1.0)},
                                      state=TrialState.PRUNED, intermediate_values={1: 1.0})  # fmt: skip
    assert pruned_as_worst([*study.trials[:3], other], maximize=False)[3] is other


def test_an_attempt_pbt_replaced_reads_as_the_worst_unless_it_was_a_copy_itself():
    study = _study()  # trial 3: pruned at a low value
    continued = [*study.trials[:3]]
    for number, attrs in ((3, {"exploited_at": 2}), (4, {"exploited_at": 2, "pbt_parent": 0, "pbt_epoch": 2})):
        replaced = copy.copy(study.trials[3])
        replaced.number, replaced.user_attrs = number, attrs
        continued.append(replaced)
    continuation = optuna.trial.create_trial(params={"x": 0.9}, distributions=SPACE, value=0.5,
                                             system_attrs={"retry_history": [3, 4]})  # fmt: skip
    seen = pruned_as_worst([*continued, continuation], maximize=False)
    assert seen[3].state == TrialState.COMPLETE and seen[3].value == max(t.value for t in study.trials[:3])
    assert seen[4].state == TrialState.PRUNED  # trained from trial 0's weights: its value is not its params'


def test_gp_in_a_conditional_space_where_trials_were_pruned_before_any_completed():
    # Pruned before any trial completed, without "y"; the complete trials after it all have "y".
    # Optuna's search space read the pruned ones as pruned (left out) and never reads them again:
    # turned complete later, they would lack a parameter of the space.
    study = optuna.create_study(sampler=make_sampler("gp:startup=3", seed=0))
    for i in range(4):
        study.add_trial(optuna.trial.create_trial(params={"x": 0.2 * i}, distributions=SPACE,
                                                  state=TrialState.PRUNED, intermediate_values={1: 9.0}))  # fmt: skip
    study.ask(SPACE)  # the search space read while none is complete (the ask itself then runs on)
    both = {**SPACE, "y": FloatDistribution(0.0, 1.0)}
    for i in range(5):
        study.add_trial(optuna.trial.create_trial(params={"x": 0.1 * i, "y": 0.1 * i}, distributions=both,
                                                  value=float(i)))  # fmt: skip
    for _ in range(3):
        study.ask(both)
