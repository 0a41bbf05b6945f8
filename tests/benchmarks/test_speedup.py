"""The wall-clock speed-up reading (issue 48's target) and what a pause and a resumption cost the simulator."""

from __future__ import annotations

import math

from sim_helpers import ToyProblem

from benchmarks.search_sim import Curve, Event, Strategy, Trace, simulate
from benchmarks.speedup import reaches, speedup_table, time_to_reach


def _trace(strategy: str, workers: int, seed: int, points: list[tuple[float, float]]) -> Trace:
    """(seconds, best so far) at each finished trial."""
    return Trace(strategy, "p", workers, seed, [Event(s, i, i, b) for i, (s, b) in enumerate(points, start=1)])


def test_time_to_reach_is_the_first_moment_the_best_is_that_good_or_better():
    events = _trace("x", 1, 0, [(10.0, math.inf), (20.0, 0.5), (30.0, 0.3), (40.0, 0.3)]).events
    assert time_to_reach(events, 0.5) == 20.0
    assert time_to_reach(events, 0.4) == 30.0  # passed, not only equalled
    assert math.isinf(time_to_reach(events, 0.2))


def test_the_speed_up_is_against_the_scripts_first_time_at_its_own_final_best_and_never_counts_as_zero():
    script = [_trace("script", 1, s, [(100.0, 0.5), (400.0, 0.2), (900.0, 0.2)]) for s in (0, 1, 2)]
    fast = [_trace("fast", 8, 0, [(10.0, 0.3), (50.0, 0.2)]),  # 400 / 50 = 8
            _trace("fast", 8, 1, [(10.0, 0.19)]),  # 400 / 10 = 40
            _trace("fast", 8, 2, [(10.0, 0.21)])]  # never  # fmt: skip
    rows = {r.seed: r for r in reaches([*script, *fast])}
    assert [rows[s].t1 for s in (0, 1, 2)] == [400.0, 400.0, 400.0]  # not 900: when it first got there
    assert [rows[s].speedup for s in (0, 1, 2)] == [8.0, 40.0, 0.0]
    table = speedup_table(list(rows.values()), factor=0.5)
    line = next(x for x in table.splitlines() if x.startswith("p ") and "fast" in x)
    # Per seed, the median over all three (the never as 0), 2 of 3 at 0.5 x 8 or more, 1 never.
    assert line.split()[3:9] == ["8.00", "40.00", "never", "8.00", "2/3", "1"]
    assert line.endswith("4.0 met")
    slow = [_trace("slow", 32, s, [(400.0, 0.2)]) for s in (0, 1, 2)]
    assert "16.0 MISSED" in speedup_table(reaches([*script, *slow]))


class Toy(ToyProblem):
    """Four epochs of 1 s; a larger x is worse at every epoch, so a pausing pruner pauses and resumes."""

    def curve(self, params):
        x = params["x"]
        return Curve([2.0 + x, 1.5 + x, 1.2 + x, 1.0 + x], [1.0] * 4)


def test_pauses_and_resumptions_cost_simulated_time_and_change_nothing_else_with_one_worker():
    asha = Strategy("asha", "random", "asha:min=1,factor=2")

    def run(pause: float, resume: float) -> Trace:
        return simulate(Toy(), asha, workers=1, seed=0, trials=12, pause_cost=pause, resume_cost=resume)

    free, resumed, paused = run(0, 0), run(0, 0.5), run(0.25, 0)
    assert free.resumes > 0 and resumed.resumes == free.resumes
    # One worker: the same decisions in the same order, only later.
    decisions = [(e.epochs, e.trials, e.best) for e in free.events]
    for other in (resumed, paused):
        assert [(e.epochs, e.trials, e.best) for e in other.events] == decisions
    assert resumed.events[-1].seconds == free.events[-1].seconds + 0.5 * free.resumes
    extra = paused.events[-1].seconds - free.events[-1].seconds
    assert extra >= 0.25 * free.resumes and (extra / 0.25).is_integer()  # every resumption followed a pause
