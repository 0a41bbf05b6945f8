"""`search start --timeout` and `--stop-at`: no new trial after them, running trials finish, the
budget stays exact, the summary says why, and the same command goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.exceptions import SearchError
from search.settings import parse_duration

SLEEP = str(Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py")
QUICK = ("--study", SLEEP, "--workers", "1", "--no-retrain", "--pruner", "none", "--patience", "off",
         "--study-option", "epochs=2", "--study-option", "epoch_seconds=0.3")  # fmt: skip


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600),
                                               (" 2H ", 7200), (5, 5), (0.5, 0.5)])  # fmt: skip
def test_durations_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "soon", "2 hours", "", "1e3", True])
def test_a_bad_duration_is_one_line_naming_the_flag(text):
    with pytest.raises(SearchError, match=r"^--timeout must be a positive duration such as 90s, 30m, 2h or 1.5d"):
        parse_duration(text)


@pytest.mark.slow
def test_a_bad_timeout_creates_nothing(cli, tmp_path):
    proc = cli("start", *QUICK, "--trials", "3", "--timeout", "soon", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--timeout must be a positive" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _counts(warm_cli, cwd, *where):
    return json.loads(warm_cli("status", "--name", "sleep", "--json", *where, cwd=cwd, check=True).stdout)


@pytest.mark.slow
def test_timeout_starts_no_new_trial_and_the_same_command_goes_on(cli, tmp_path, warm_cli, study_url):
    where = ("--storage", study_url)  # the embedded SQLite file and a real PostgreSQL database
    proc = cli("start", *QUICK, *where, "--trials", "12", "--timeout", "6s", cwd=tmp_path, check=True)
    status = _counts(warm_cli, tmp_path, *where)
    assert 1 <= status["finished"] < 12 and status["running"] == status["waiting"] == 0
    assert status["budget"] == status["finished"] and status["done"]
    assert status["ended_early"] == {"reason": "--timeout 6 s passed", "asked": 12, "claimed": status["finished"]}
    assert f"the search ended early: --timeout 6 s passed; no new trial after {status['finished']} of the 12 asked" in (
        proc.stdout)  # fmt: skip
    again = cli("start", *QUICK, *where, "--trials", "12", cwd=tmp_path, check=True)  # no limit this time
    assert "ended early" not in again.stdout
    status = _counts(warm_cli, tmp_path, *where)
    assert (status["finished"], status["budget"], status["complete"]) == (12, 12, 12)
    assert status["ended_early"] is None  # the new run went on to its budget


@pytest.mark.slow
def test_timeout_ends_a_grid_search_and_the_next_run_takes_the_points_left(cli, tmp_path, warm_cli, study_url):
    """A grid's points are queued as it starts: an early stop leaves those no worker took queued (not
    run past the limit), and the next run, given no --trials, runs them: each point exactly once."""
    where = ("--storage", study_url)
    grid = ("--sampler", "grid", "--grid", "x=-1,0,1,2", "--grid", "lr=0.01,0.03,0.1,0.3")  # 16 points
    proc = cli("start", *QUICK, *where, *grid, "--timeout", "4s", cwd=tmp_path, check=True)
    status = _counts(warm_cli, tmp_path, *where)
    assert status["finished"] < 16 and status["running"] == 0 and status["waiting"] == 16 - status["finished"]
    assert status["budget"] == status["finished"] and status["done"]
    assert status["ended_early"] == {"reason": "--timeout 4 s passed", "asked": 16, "claimed": status["finished"]}
    assert f"no new trial after {status['finished']} of the 16 asked" in proc.stdout
    cli("start", *QUICK, *where, *grid, cwd=tmp_path, check=True)  # the same search, no limit, no --trials
    status = _counts(warm_cli, tmp_path, *where)
    assert (status["finished"], status["budget"], status["complete"], status["waiting"]) == (16, 16, 16, 0)
    rows = json.loads(warm_cli("trials", "--name", "sleep", "--json", *where, cwd=tmp_path, check=True).stdout)
    assert sorted((r["params"]["x"], r["params"]["lr"]) for r in rows) == sorted(
        (x, lr) for x in (-1, 0, 1, 2) for lr in (0.01, 0.03, 0.1, 0.3))  # fmt: skip


@pytest.mark.slow
def test_an_epoch_budget_ends_a_grid_search_and_a_larger_one_goes_on(cli, tmp_path, warm_cli):
    grid = ("--sampler", "grid", "--grid", "x=-1,0,1,2", "--grid", "lr=0.01,0.03,0.1,0.3")  # 16 points, 2 epochs each
    cli("start", *QUICK, *grid, "--epoch-budget", "4", cwd=tmp_path, check=True)
    status = _counts(warm_cli, tmp_path)
    assert (status["finished"], status["waiting"], status["budget"]) == (2, 14, 2)  # one worker: exact
    more = cli("start", *QUICK, *grid, "--epoch-budget", "10", cwd=tmp_path)  # no --trials: the grid's points left
    assert more.returncode == 0, more.stderr
    status = _counts(warm_cli, tmp_path)
    assert (status["finished"], status["waiting"]) == (5, 11) and status["ended_early"]["asked"] == 16


def test_after_an_early_stop_a_claim_takes_a_retry_and_leaves_the_queued_points(study_url):
    """Stopped: a queued retry still runs (its trial was started), a queued new trial waits for the next run."""
    from optuna.trial import TrialState, create_trial
    from search_helpers import sleep_study_coordinator

    from search.coordination import stop_new_trials

    coordinator, study = sleep_study_coordinator(study_url, "queued", trials=4)
    for x in (0.5, 1.0):  # as a grid's points are queued
        study.enqueue_trial({"x": x, "lr": 0.01})
    first, _ = coordinator.claim(study)
    assert first.number == 0  # the oldest queued point
    study.tell(first, state=TrialState.FAIL)  # its worker died: its retry is queued after the second point
    study.add_trial(create_trial(state=TrialState.WAITING, system_attrs={"failed_trial": first.number}))
    counts = coordinator.counts()
    assert (counts.logical, counts.unstarted, counts.started) == (2, 1, 1)
    assert stop_new_trials(coordinator, "--timeout 1 s passed")["claimed"] == 1 and coordinator.budget() == 1
    retry, _ = coordinator.claim(study)
    assert retry.number == 2, "the queued point was taken after the stop, not the retry"
    study.tell(retry, 0.1)
    nothing, counts = coordinator.claim(study)
    assert nothing is None and counts.unstarted == 1 and coordinator.counts().done(coordinator.budget())


@pytest.mark.slow
def test_stop_at_ends_the_search_once_the_best_value_reaches_it(cli, tmp_path, warm_cli):
    # The sleep study's loss is the squared distance of x in [-2, 2] from 0.3: at most 5.29.
    proc = cli("start", *QUICK, "--trials", "40", "--stop-at", "6", cwd=tmp_path, check=True)
    status = _counts(warm_cli, tmp_path)
    assert 1 <= status["finished"] < 40 and status["best_value"] <= 6
    assert "the search ended early: --stop-at 6 reached (best " in proc.stdout
