"""`search enqueue`: configurations to try first, checked against the study's space and its budget,
taken by workers before the sampler is asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SLEEP = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py"


def _sleep_study(project: Path, storage: str | None = None) -> list[str]:
    """A sleep study of 4 trials, created and not yet trained, in ``storage`` (the embedded store
    under ``project`` if None); the flags that reach it."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.settings import SearchSettings

    loc = resolve_locations(storage=storage, tracking_uri=None, artifact_location=None, project_dir=project)
    opts = StartOptions(study=str(SLEEP), trials=4, settings=SearchSettings(pruner="none", patience="off"),
                        study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts), 4)
    return ["--name", "sleep", "--project-dir", str(project), *(["--storage", storage] if storage else [])]


@pytest.fixture
def sleep_study(tmp_path):
    """A sleep study of 4 trials, created and not yet trained, in embedded stores under tmp_path."""
    return _sleep_study(tmp_path / "p")


@pytest.mark.slow
def test_queued_configurations_run_first_and_count_in_the_budget(study_url, search_main, cli, tmp_path, warm_cli):
    sleep_study = _sleep_study(tmp_path / "p", study_url)  # on SQLite and PostgreSQL
    (tmp_path / "known.csv").write_text("x,lr\n0.25,0.01\n-1.5,\n")
    code, out, err = search_main(["enqueue", *sleep_study, "--params", "x=0.3,lr=0.02", "--file",
                                  str(tmp_path / "known.csv")])  # fmt: skip
    assert code == 0, err
    assert out.strip() == "queued 3 configurations in study 'sleep' as trials 0, 1, 2; workers take them first"
    cli("worker", *sleep_study, cwd=tmp_path, check=True)
    rows = json.loads(warm_cli("trials", *sleep_study, "--json", cwd=tmp_path, check=True).stdout)
    assert [r["state"] for r in rows] == ["COMPLETE"] * 4  # the budget: 3 queued, 1 from the sampler
    assert [r["params"]["x"] for r in rows[:3]] == [0.3, 0.25, -1.5]
    assert rows[0]["params"]["lr"] == 0.02 and rows[1]["params"]["lr"] == 0.01


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--params", "y=1"], "configuration 1: 'y' is no parameter of the study; its parameters: lr, x"),
        (["--params", "x=9"], "configuration 1: x=9 is outside the study's range -2..2"),
        (["--params", "x=abc"], "configuration 1: x must be a number, got 'abc'"),
        ([], "no configuration to queue: give --params or --file"),
        (["--params", "x=0"] * 5, "5 configurations but the budget has 4 trial(s) left"),
    ],
)
def test_a_configuration_that_does_not_fit_is_one_line_and_queues_nothing(sleep_study, search_main, args, said):
    code, _, err = search_main(["enqueue", *sleep_study, *args])
    assert code == 2 and err.count("\n") == 1 and said in err, err
    code, out, _ = search_main(["trials", *sleep_study, "--json"])
    assert json.loads(out) == []


def test_the_python_call_queues_the_same(sleep_study, tmp_path):
    import search

    assert search.enqueue("sleep", [{"x": 1.0}], project_dir=tmp_path / "p") == [0]
    assert search.trials("sleep", project_dir=tmp_path / "p")["state"].tolist() == ["WAITING"]


@pytest.mark.slow
def test_search_start_queues_known_configurations_before_any_worker_joins(cli, tmp_path, warm_cli):
    (tmp_path / "known.json").write_text(json.dumps([{"x": 0.3, "lr": 0.05}, {"x": -1.0}]))
    proc = cli("start", "--study", str(SLEEP), "--trials", "3", "--workers", "2", "--enqueue", "known.json",
               "--study-option", "epoch_seconds=0", "--no-retrain", cwd=tmp_path, check=True)  # fmt: skip
    assert "queued 2 known configurations to run first (--enqueue)" in proc.stdout
    rows = json.loads(warm_cli("trials", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout)
    assert len(rows) == 3 and [r["params"]["x"] for r in rows[:2]] == [0.3, -1.0]


@pytest.mark.slow
def test_search_start_refuses_a_known_configuration_outside_the_space_and_creates_nothing(cli, tmp_path):
    (tmp_path / "known.json").write_text(json.dumps([{"x": 5}]))
    proc = cli("start", "--study", str(SLEEP), "--trials", "3", "--workers", "1", "--enqueue", "known.json",
               cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--enqueue configuration 1: x=5 is outside the study's range -2..2" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["known.json"]
