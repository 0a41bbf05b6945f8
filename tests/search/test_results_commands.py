"""A study's results without Python: `search trials`, `search best`, `search delete`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

FAULTY_STUDY = str(Path(__file__).parent / "data" / "faulty_study.py")
SLEEP_STUDY = str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "sleep_study.py")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory, cli) -> Path:
    """Four trials: one trains, one diverges, one hits a bug, one runs out of memory."""
    work = tmp_path_factory.mktemp("trials")
    cli("start", "--study", FAULTY_STUDY, "--trials", "4", "--workers", "1", "--pruner", "none", "--no-retrain",
        cwd=work, check=True)  # fmt: skip
    return work


def _optuna_trials(work: Path, name: str):
    import optuna

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{work / '.search' / 'optuna.db'}")
    return sorted(study.get_trials(), key=lambda t: t.number)


def test_trials_json_lists_every_trial_with_state_params_and_reason(faulty, cli):
    rows = json.loads(cli("trials", "--study", FAULTY_STUDY, "--json", cwd=faulty, check=True).stdout)
    expected = _optuna_trials(faulty, "faulty")
    assert [r["number"] for r in rows] == [t.number for t in expected]
    assert [r["state"] for r in rows] == [t.state.name for t in expected]
    assert [r["params"] for r in rows] == [t.params for t in expected]
    for row, trial in zip(rows, expected, strict=True):
        assert row["mlflow_run_id"] == trial.user_attrs["mlflow_run_id"]
        assert row["worker"] == trial.user_attrs["worker"] and row["duration_seconds"] >= 0
        assert (row["fail_reason"] is not None) == (trial.state.name == "FAIL")
    assert any("out of memory" in (r["fail_reason"] or "").lower() for r in rows)


def test_trials_csv_and_state_filter(faulty, cli):
    text = cli("trials", "--name", "faulty", "--csv", cwd=faulty, check=True).stdout
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == 4 and {"params.x", "fail_reason", "mlflow_run_id"} <= set(table[0])
    failed = json.loads(cli("trials", "--name", "faulty", "--json", "--state", "fail", cwd=faulty, check=True).stdout)
    assert failed and {r["state"] for r in failed} == {"FAIL"}
    plain = cli("trials", "--name", "faulty", cwd=faulty, check=True).stdout.splitlines()
    assert plain[0].split()[:3] == ["#", "state", "value"] and len(plain) == 5
    both = cli("trials", "--name", "faulty", "--json", "--csv", cwd=faulty)
    assert both.returncode == 2 and both.stderr.strip() == "error: give --json or --csv, not both"


@pytest.fixture(scope="module")
def retrained(tmp_path_factory, cli) -> Path:
    work = tmp_path_factory.mktemp("best")
    cli("start", "--study", "resmlp", "--trials", "2", "--workers", "1", "--study-option", "search_epochs=1",
        "--study-option", "full_epochs=1", cwd=work, check=True)  # fmt: skip
    cli(
        "start",
        "--study",
        SLEEP_STUDY,
        "--trials",
        "1",
        "--workers",
        "1",
        "--study-option",
        "epoch_seconds=0",
        "--no-retrain",
        cwd=work,
        check=True,
    )  # fmt: skip  (a second study in the same stores)
    return work


def test_best_gives_the_best_trial_and_the_champion(retrained, cli):
    result = json.loads(cli("best", "--study", "resmlp", "--json", cwd=retrained, check=True).stdout)
    trials = [t for t in _optuna_trials(retrained, "resmlp") if t.state.name == "COMPLETE"]
    top = min(trials, key=lambda t: t.value)
    assert (result["trial"], result["value"], result["params"]) == (top.number, top.value, top.params)
    champion = result["champion"]
    assert champion["version"] == "1" and champion["source_trial"] == top.number
    assert {"test_loss", "test_accuracy"} <= set(champion["test_metrics"])
    assert champion["exports"] == {"onnx": "ok", "torchscript": "ok"}
    text = cli("best", "--study", "resmlp", cwd=retrained, check=True).stdout
    assert f"best trial {top.number}" in text and "champion: resmlp version 1" in text


def test_the_report_shows_the_champion_and_every_trial(retrained, cli):
    cli("report", "--study", "resmlp", "-o", "r.html", "--no-mlflow", cwd=retrained, check=True)
    page = (retrained / "r.html").read_text()
    assert "Registered model resmlp version 1 (retrained trial" in page and "test_accuracy" in page
    assert "Exports: onnx ok, torchscript ok." in page
    assert page.count('<tr class="complete">') + page.count('<tr class="pruned">') == 2


def test_delete_asks_then_removes_the_study_its_runs_and_checkpoints_only(retrained, cli):
    from mlflow import MlflowClient

    uri = f"sqlite:///{retrained / '.search' / 'mlflow.db'}"
    client = MlflowClient(uri, uri)  # the registry too: never a URI another test left behind
    (retrained / ".search" / "checkpoints" / "resmlp" / "trial-9").mkdir(parents=True)
    declined = cli("delete", "--study", "resmlp", cwd=retrained)  # stdin is empty: the answer is no
    assert declined.returncode == 1 and "nothing deleted" in declined.stdout
    assert cli("status", "--study", "resmlp", cwd=retrained).returncode == 0

    proc = cli("delete", "--study", "resmlp", "--yes", cwd=retrained, check=True)
    assert "deleted study 'resmlp': 2 trials" in proc.stdout
    gone = cli("status", "--study", "resmlp", cwd=retrained)
    assert gone.returncode == 2 and "does not exist" in gone.stderr
    assert client.get_experiment_by_name("resmlp") is None
    assert not (retrained / ".search" / "checkpoints" / "resmlp").exists()
    assert str(client.get_model_version_by_alias("resmlp", "champion").version) == "1"  # the registry is kept
    # The other study is untouched, and a new study of the same name starts clean.
    assert cli("status", "--study", SLEEP_STUDY, cwd=retrained).returncode == 0
    assert client.search_runs([client.get_experiment_by_name("sleep").experiment_id])


@pytest.mark.postgres
def test_delete_on_postgres_removes_the_study(cli, tmp_path, pg_url):
    cli("start", "--study", SLEEP_STUDY, "--trials", "1", "--workers", "1", "--study-option", "epoch_seconds=0",
        "--no-retrain", "--storage", pg_url, cwd=tmp_path, check=True)  # fmt: skip
    cli("delete", "--name", "sleep", "--yes", "--storage", pg_url, cwd=tmp_path, check=True)
    gone = cli("status", "--name", "sleep", "--storage", pg_url, cwd=tmp_path)
    assert gone.returncode == 2 and "does not exist" in gone.stderr
