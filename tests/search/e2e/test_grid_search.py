"""`search start --sampler grid`: every point of the grid runs exactly once, whatever the workers do.

Through `search start` with real workers and the training-free sleep study
(``benchmarks/studies/sleep_study.py``: parameters ``x`` in -2..2 and ``lr`` in 0.001..0.5, log).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from search_helpers import FAST, SLEEP_STUDY, assert_exact_budget, parent_summary, start_losing_a_worker

GRID = ["--sampler", "grid", "--grid", "x=-1,0,1", "--grid", "lr=0.01,0.1"]
POINTS = {(x, lr) for x, lr in itertools.product([-1.0, 0.0, 1.0], [0.01, 0.1])}
QUICK = ["--no-retrain", "--pruner", "none", "--patience", "off"]


def _points(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(r["params"]["x"], r["params"]["lr"]) for r in rows if r["state"] == "COMPLETE"]


@pytest.mark.slow
def test_every_point_runs_exactly_once_with_two_workers(cli, warm_cli, tmp_path):
    proc = cli("start", "--study", str(SLEEP_STUDY), *GRID, "--workers", "2", *QUICK,
               "--study-option", "epoch_seconds=0.4", cwd=tmp_path, check=True)  # fmt: skip
    assert "budget 6 trials" in proc.stdout  # no --trials: the grid's size
    assert (
        "  grid: 6 points (values per parameter: lr 2, x 3); each runs once, in the order --seed 0 fixes" in proc.stdout
    )
    rows = json.loads(warm_cli("trials", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout)
    assert sorted(_points(rows)) == sorted(POINTS) and len(rows) == 6
    assert len({r["worker"] for r in rows}) == 2, rows  # both workers took points
    status = warm_cli("status", "--name", "sleep", cwd=tmp_path, check=True).stdout
    assert "  grid search: 6 points (values per parameter: lr 2, x 3); 0 queued" in status


@pytest.mark.slow
def test_a_budget_below_the_grid_runs_a_prefix_and_a_larger_one_the_rest(cli, warm_cli, tmp_path):
    """The first --trials points in the seed's order; resuming with the whole budget (the grid is
    the stored one: no --grid needed) runs the other points, none twice."""
    cli("start", "--study", str(SLEEP_STUDY), *GRID, "--trials", "2", "--workers", "1", *QUICK,
        "--study-option", "epoch_seconds=0", cwd=tmp_path, check=True)  # fmt: skip
    first = _points(json.loads(warm_cli("trials", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout))
    again = cli("start", "--study", str(SLEEP_STUDY), "--trials", "6", "--workers", "1", *QUICK,
                "--study-option", "epoch_seconds=0", cwd=tmp_path, check=True)  # fmt: skip
    assert "--trials: budget 2 -> 6" in again.stdout
    rows = json.loads(warm_cli("trials", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout)
    assert len(first) == 2 and _points(rows)[:2] == first
    assert sorted(_points(rows)) == sorted(POINTS) and len(rows) == 6


@pytest.fixture
def grid_study(tmp_path):
    """A grid study of the sleep study, created (its points queued) and not trained, under tmp_path."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path / "p")
    opts = StartOptions(study=str(SLEEP_STUDY), trials=None, settings=SearchSettings(sampler="grid", pruner="none"),
                        grid={"x": [-1, 0, 1], "lr": [0.01, 0.1]}, study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts))
    return ["--name", "sleep", "--project-dir", str(tmp_path / "p")]


def test_queued_points_show_their_params(grid_study, search_main):
    code, out, _ = search_main(["trials", *grid_study, "--json"])
    rows = json.loads(out)
    assert code == 0 and [r["state"] for r in rows] == ["WAITING"] * 6
    assert {(r["params"]["x"], r["params"]["lr"]) for r in rows} == POINTS


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--grid", "x=-1,0", "--grid", "lr=0.01,0.2"],
            "--grid differs from the study's stored grid (lr: stored 0.01,0.1, given 0.01,0.2; x: stored -1,0,1, "
            "given -1,0); drop the flag to resume",
        ),
        (["--sampler", "tpe", "--trials", "6"], "--sampler tpe differs from the study's stored --sampler grid"),
        (["--trials", "7"], "--trials 7 is more than the grid's 6 points (values per parameter: lr 2, x 3)"),
    ],
)
def test_resuming_with_another_grid_is_refused_and_changes_nothing(grid_study, search_main, monkeypatch, tmp_path,
                                                                   args, said):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    code, _, err = search_main(["start", "--study", str(SLEEP_STUDY), *grid_study, "--workers", "0", *args])
    assert code == 2 and err.count("\n") == 1 and said in err, err
    code, out, _ = search_main(["status", *grid_study, "--json"])
    assert json.loads(out)["budget"] == 6 and json.loads(out)["waiting"] == 6


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--sampler", "grid"],
            "--sampler grid needs values for x (continuous -2..2), lr (continuous 0.001..0.5, "
            "log scale): give them with --grid x=V1,V2,... --grid lr=V1,V2,...",
        ),
        (["--sampler", "grid", "--grid", "x=0,1"], "--sampler grid needs values for lr (continuous"),
        (["--sampler", "grid", "--grid", "x=0,abc", "--grid", "lr=0.1"], "--grid: x must be a number, got 'abc'"),
        (["--sampler", "grid", "--grid", "x=0,5", "--grid", "lr=0.1"], "--grid: x=5 is outside the study's range"),
        (["--sampler", "grid", "--grid", "x", "--grid", "lr=0.1"], "--grid 'x': expected NAME=V1,V2,..."),
        (["--sampler", "grid", "--grid", "y=1", "--grid", "lr=0.1"], "--grid y: no such parameter"),
        ([*GRID, "--trials", "7"], "--trials 7 is more than the grid's 6 points"),
        ([*GRID, "--enqueue", "../known.json"], "--enqueue does not go with --sampler grid"),
        (["--grid", "x=0", "--trials", "2"], "--grid gives a grid search's values"),
        (["--sampler", "tpe", "--grid", "x=0", "--trials", "2"], "--grid gives a grid search's values: add --sampler"),
        (["--sampler", "tpe"], "--trials is required"),
    ],
)
def test_bad_grid_input_is_one_line_and_creates_nothing(search_main, monkeypatch, tmp_path, args, said):
    (tmp_path / "known.json").write_text('[{"x": 0.5}]')
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    code, _, err = search_main(["start", "--study", str(SLEEP_STUDY), "--workers", "0", *args])
    assert code == 2 and err.count("\n") == 1 and said in err, err
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.postgres
@pytest.mark.slow
def test_a_killed_workers_point_runs_again_once(pg_url, warm_cli, tmp_path):
    """A worker SIGKILLed mid-trial: its trial is reaped, its retry runs the same point (on the
    fresh local worker or the other one), and every point ends complete exactly once; `status`,
    `best`, the report and the MLflow parent run show the grid study. (PostgreSQL only, to keep
    CI short: the SQLite path of a grid search is the tests above, of a killed worker the others'.)"""
    running, watch = start_losing_a_worker(["--study", str(SLEEP_STUDY), "--workers", "2", *FAST, *GRID,
                                            "--study-option", "epochs=4", "--study-option", "epoch_seconds=0.5"],
                                           pg_url, "grid", tmp_path)  # fmt: skip
    trials = watch.trials()
    assert_exact_budget(trials, 6)
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == running.number]
    assert retry.state.name == "COMPLETE" and retry.params == running.params
    done = {t.number: (t.params["x"], t.params["lr"]) for t in trials if t.state.name == "COMPLETE"}
    assert sorted(done.values()) == sorted(POINTS)
    where = ["--name", "grid", "--storage", pg_url]
    status = json.loads(warm_cli("status", *where, "--json", cwd=tmp_path, check=True).stdout)
    finished = (status["finished"], status["budget"], status["failed"], status["retried"])
    assert finished == (6, 6, 0, 1)  # the dead trial is not counted failed: its retry finished it
    best = json.loads(warm_cli("best", *where, "--json", cwd=tmp_path, check=True).stdout)
    assert best["trial"] == status["best_trial"] and (best["params"]["x"], best["params"]["lr"]) == done[best["trial"]]
    warm_cli("report", *where, "-o", str(tmp_path / "report.html"), cwd=tmp_path, check=True)
    assert "<th>sampler / pruner</th><td>grid / none</td>" in (tmp_path / "report.html").read_text()
    summary = parent_summary(tmp_path / ".search", "grid")
    assert (summary["best_trial"], summary["finished"], summary["retried"]) == (best["trial"], 6, 1)


def test_help_names_the_grid(cli, tmp_path):
    out = cli("start", "--help", cwd=tmp_path, check=True).stdout
    assert "grid" in out.split("--sampler", 1)[1].split("--pruner", 1)[0]
    assert "--grid NAME=V1,V2,..." in out


def test_resuming_without_trials_or_grid_keeps_the_stored_ones():
    from search.api import StartOptions
    from search.api._resume import reconcile
    from search.settings import SearchSettings, StudyRecord

    grid = {"lr": [0.01, 0.1], "x": [-1.0, 1.0]}
    stored = StudyRecord(study_ref="sleep", metric="val_loss", direction="minimize", search_epochs=3,
                         settings=SearchSettings(sampler="grid"), grid=grid)  # fmt: skip
    opts, lines = reconcile(StartOptions(study="sleep", trials=None, explicit=frozenset()), stored, budget=3)
    assert (opts.trials, opts.grid, opts.settings.sampler, lines) == (3, stored.grid, "grid", [])
    opts, _ = reconcile(StartOptions(study="sleep", trials=None, grid={"x": [-1, 1, -1]}, explicit=frozenset({"grid"})),
                        stored, budget=3)  # fmt: skip
    assert opts.grid == {"lr": [0.01, 0.1], "x": [-1, 1]}  # the same grid: lr kept, x's repeat dropped
