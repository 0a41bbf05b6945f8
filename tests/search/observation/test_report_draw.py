"""The report of a large study draws a sample and says so; its counts still cover every trial."""

from __future__ import annotations

import re

from search.coordination import Coordinator
from search.observation import _report_draw
from search.observation._report import build_sections
from search.observation._report_draw import choose, curve_steps


def test_a_sample_keeps_every_improvement_the_best_and_the_running():
    # 10,000 trials in trial order: values fall at ids 10, 5000 and 9000 (the improvements on the best so far)
    objectives = []
    for tid in range(10_000):
        value = {10: 5.0, 5000: 2.0, 9000: 1.0}.get(tid, 10.0 + (tid % 97) / 10)
        state = "RUNNING" if tid in (4321, 8765) else "COMPLETE"
        objectives.append((tid, tid, state, None if state == "RUNNING" else value))
    objectives[0] = (0, 0, "COMPLETE", 50.0)  # the first complete trial is the first best
    ids = choose(objectives, maximize=False, limit=500, best=20)
    assert len(ids) <= 500 and ids == sorted(ids)
    assert {0, 10, 5000, 9000, 4321, 8765} <= set(ids)
    ranked = sorted((v, tid) for tid, _, s, v in objectives if s == "COMPLETE")[:20]
    assert {tid for _, tid in ranked} <= set(ids)
    assert all(sum(1 for t in ids if t // 1000 == block) >= 40 for block in range(10))  # spread over the study
    flipped = choose([(t, n, s, None if v is None else -v) for t, n, s, v in objectives], True, 500, 20)
    assert flipped == ids  # maximizing the negated values picks the same
    assert choose(objectives[:300], False, limit=500) == list(range(300))  # a small study: every trial
    assert len(choose(objectives[:504], False, limit=500, best=20)) == 500  # just past the limit: the limit


def test_curves_keep_their_ends_and_at_most_the_points_asked():
    assert curve_steps(list(range(1, 51))) == list(range(1, 51))
    steps = curve_steps(list(range(1, 1001)), most=100)
    assert len(steps) == 100 and steps[0] == 1 and steps[-1] == 1000 and steps == sorted(set(steps))


def test_a_report_past_the_limit_draws_a_sample_and_counts_every_failure(sqlite_demo, monkeypatch):
    monkeypatch.setattr(_report_draw, "REPORT_TRIALS", 4)  # the demo's 7 trials are "large"
    monkeypatch.setattr(_report_draw, "BEST_DRAWN", 1)
    sections = {s.key: s for s in build_sections(Coordinator(sqlite_demo.url, sqlite_demo.name))}
    # drawn: trials 0 and 2 (the best so far, in turn), 6 (running) and the first of the rest, 1 (pruned);
    # not the failed trial 3
    assert sections["curves"].note.startswith("val_loss after each epoch. Of 4 trials: 2 complete after all 4 search epochs (blue); 1 pruned")
    assert all("Drawn from 4 of the study's 7 trials" in s.note for s in sections.values() if s.figure is not None)
    assert sections["failures"].note == "1 × diverged at epoch 1"  # counted over every trial
    history = sections["history"].figure
    assert list(history.data[0].x) == [0, 2] and list(history.data[1].y) == [0.5, 0.4]
    assert sections["trials"].title == "The best 4 trials"
    assert re.findall(r'<tr class="(\w+)"><td data-sort="(\d+)"', sections["trials"].html) == [
        ("complete", "2"), ("complete", "0"), ("complete", "4"), ("pruned", "1")]  # fmt: skip
