"""--objective, --constraint and --select: parsing, a trial's values and constraints, and the
champion among several objectives (pure functions; the end-to-end run is tests/search/e2e/test_objectives_e2e.py)."""

from __future__ import annotations

import math

import pytest

from search.exceptions import SearchError
from search.settings import (
    Candidate,
    Objective,
    check_objective_flags,
    constraint_values,
    gate_objective,
    missing_metrics,
    objective_values,
    pareto_front,
    parse_constraints,
    parse_objectives,
    prunes,
    select,
)
from search.settings._objectives import parse_constraint


@pytest.mark.parametrize(
    ("text", "metric", "direction"),
    [("val_loss:min", "val_loss", "minimize"), ("val_accuracy:max", "val_accuracy", "maximize"),
     ("latency_ms:MIN", "latency_ms", "minimize"), ("flops_per_sample:maximize", "flops_per_sample", "maximize")],
)  # fmt: skip
def test_an_objective_is_a_metric_and_a_direction(text, metric, direction):
    assert parse_objectives([text]) == [Objective(metric, direction)]


@pytest.mark.parametrize("text", ["val_loss", "val_loss:down", ":min", "val loss:min", "val_loss:"])
def test_a_bad_objective_is_one_line_naming_the_flag(text):
    with pytest.raises(SearchError, match=r"^--objective .*expected METRIC:min or METRIC:max"):
        parse_objectives([text])


def test_an_objective_named_twice_is_refused():
    with pytest.raises(SearchError, match="--objective val_loss is given twice"):
        parse_objectives(["val_loss:min", "val_loss:max"])


@pytest.mark.parametrize(
    ("text", "label", "observed", "value"),
    [("latency_ms<=2", "latency_ms<=2", 1.5, -0.5), ("latency_ms <= 2", "latency_ms<=2", 3.0, 1.0),
     ("val_accuracy>=0.9", "val_accuracy>=0.9", 0.95, -0.05), ("params<=1e6", "params<=1e+06", 2e6, 1e6)],
)  # fmt: skip
def test_a_constraint_value_is_at_most_zero_when_it_holds(text, label, observed, value):
    constraint = parse_constraint(text)
    assert constraint.label == label
    assert constraint.value(observed) == pytest.approx(value)


@pytest.mark.parametrize("text", ["latency_ms<2", "latency_ms=2", "latency_ms<=fast", "<=2", "latency_ms<=nan"])
def test_a_bad_constraint_is_one_line_naming_the_flag(text):
    with pytest.raises(SearchError, match=r"^--constraint .*expected METRIC<=BOUND or METRIC>=BOUND"):
        parse_constraints([text])


def test_bad_select_and_stop_at_with_several_objectives_are_refused_before_anything_starts():
    with pytest.raises(SearchError, match="--select 'best': choose one of first, knee"):
        check_objective_flags([], [], "best", None)
    with pytest.raises(SearchError, match="^--stop-at compares one best value"):
        check_objective_flags(["val_loss:min", "latency_ms:min"], [], "first", 0.1)
    check_objective_flags(["val_accuracy:max"], ["latency_ms<=2"], "knee", 0.9)  # one objective: --stop-at is fine


def test_only_the_studys_own_per_epoch_objective_is_pruned_on():
    assert prunes([Objective("val_loss", "minimize")], "val_loss", "minimize")
    assert not prunes([Objective("val_loss", "maximize")], "val_loss", "minimize")
    assert not prunes([Objective("val_accuracy", "maximize")], "val_loss", "minimize")
    assert not prunes([Objective("val_loss", "minimize"), Objective("latency_ms", "minimize")], "val_loss", "minimize")


def test_values_take_the_best_epoch_of_the_per_epoch_metric_and_the_final_value_of_the_rest():
    final = {"val_loss": 0.4, "val_accuracy": 0.8, "latency_ms": 1.2}  # val_loss: the last epoch's
    goals = [
        Objective("val_loss", "minimize"),
        Objective("latency_ms", "minimize"),
        Objective("val_accuracy", "maximize"),
    ]
    assert objective_values(goals, final, "val_loss", 0.3) == [0.3, 1.2, 0.8]
    limits = parse_constraints(["latency_ms<=1", "val_loss<=0.35"])
    assert constraint_values(limits, final, "val_loss", 0.3) == pytest.approx({"latency_ms<=1": 0.2,
                                                                               "val_loss<=0.35": -0.05})  # fmt: skip
    assert missing_metrics(["val_loss", "latency_ms", "params"], final, "val_loss") == ["params"]


def test_the_champion_gate_compares_the_first_validation_objective():
    goals = [Objective("latency_ms", "minimize"), Objective("val_accuracy", "maximize")]
    assert gate_objective(goals, "val_loss", "minimize") == Objective("val_accuracy", "maximize")
    assert gate_objective(goals[:1], "val_loss", "minimize") == Objective("val_loss", "minimize")


# -- the Pareto front and the champion ----------------------------------------------------------

MIN_MIN = [False, False]
POINTS = [
    Candidate(0, (1.0, 10.0)),
    Candidate(1, (2.0, 4.0)),
    Candidate(2, (4.0, 2.0)),
    Candidate(3, (10.0, 1.0)),
    Candidate(4, (5.0, 5.0)),  # dominated by 1 and 2
    Candidate(5, (0.5, 0.5), feasible=False),  # would dominate all, but misses a constraint
]


def test_the_front_is_the_feasible_undominated_trials():
    assert [c.number for c in pareto_front(POINTS, MIN_MIN)] == [0, 1, 2, 3]


def test_first_takes_the_best_first_objective_among_feasible_trials():
    assert select(POINTS, MIN_MIN, "first").number == 0
    assert select(POINTS, [True, False], "first").number == 3  # maximise the first objective


def test_knee_takes_the_front_point_nearest_the_utopia_point_after_scaling():
    # Scaled over the front (x 1..10, y 1..10): 1 at (1/9, 3/9), 2 at (3/9, 1/9): equally near; the lower number wins.
    assert select(POINTS, MIN_MIN, "knee").number == 1
    moved = [*POINTS[:2], Candidate(2, (3.0, 2.0)), *POINTS[3:]]  # now (2/9, 1/9): nearer
    assert select(moved, MIN_MIN, "knee").number == 2


def test_one_objective_knee_is_first_and_ties_go_to_the_lower_number():
    single = [Candidate(3, (0.2,)), Candidate(1, (0.2,)), Candidate(2, (0.5,))]
    assert select(single, [False], "knee").number == select(single, [False], "first").number == 1


def test_no_feasible_trial_no_champion():
    assert select([Candidate(0, (1.0, 1.0), feasible=False)], MIN_MIN) is None
    assert select([Candidate(0, (math.inf, 1.0))], MIN_MIN) is None
