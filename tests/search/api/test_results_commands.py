"""A study's results without Python: `search trials`, `search best`, `search delete`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

FAULTY_STUDY = str(Path(__file__).resolve().parents[1] / "data" / "faulty_study.py")
SLEEP_STUDY = str(Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py")


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


@pytest.mark.slow
def test_trials_json_lists_every_trial_with_state_params_and_reason(faulty, warm_cli):
    rows = json.loads(warm_cli("trials", "--study", FAULTY_STUDY, "--json", cwd=faulty, check=True).stdout)
    expected = _optuna_trials(faulty, "faulty")
    assert [r["number"] for r in rows] == [t.number for t in expected]
    assert [r["state"] for r in rows] == [t.state.name for t in expected]
    assert [r["params"] for r in rows] == [t.params for t in expected]
    for row, trial in zip(rows, expected, strict=True):
        assert row["mlflow_run_id"] == trial.user_attrs["mlflow_run_id"]
        assert row["worker"] == trial.user_attrs["worker"] and row["duration_seconds"] >= 0
        assert (row["fail_reason"] is not None) == (trial.state.name == "FAIL")
    assert any("out of memory" in (r["fail_reason"] or "").lower() for r in rows)


@pytest.mark.slow
def test_trials_csv_and_state_filter(faulty, warm_cli):
    text = warm_cli("trials", "--name", "faulty", "--csv", cwd=faulty, check=True).stdout
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == 4 and {"params.x", "fail_reason", "mlflow_run_id"} <= set(table[0])
    failed = warm_cli("trials", "--name", "faulty", "--json", "--state", "fail", cwd=faulty, check=True)
    failed = json.loads(failed.stdout)
    assert failed and {r["state"] for r in failed} == {"FAIL"}
    plain = warm_cli("trials", "--name", "faulty", cwd=faulty, check=True).stdout.splitlines()
    assert plain[0].split()[:3] == ["#", "state", "value"] and len(plain) == 5
    both = warm_cli("trials", "--name", "faulty", "--json", "--csv", cwd=faulty)
    assert both.returncode == 2 and both.stderr.strip() == "error: give --json or --csv, not both"


RESMLP_START = ("start", "--study", "resmlp", "--trials", "2", "--workers", "1", "--study-option", "search_epochs=1",
                "--study-option", "full_epochs=3")  # fmt: skip


@pytest.fixture(scope="module")
def retrained(tmp_path_factory, cli) -> Path:
    work = tmp_path_factory.mktemp("best")
    first = cli(*RESMLP_START, cwd=work, check=True)
    (work / "first-start.out").write_text(first.stdout)
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


@pytest.mark.slow
def test_best_gives_the_best_trial_and_the_champion(retrained, warm_cli):
    result = json.loads(warm_cli("best", "--study", "resmlp", "--json", cwd=retrained, check=True).stdout)
    trials = [t for t in _optuna_trials(retrained, "resmlp") if t.state.name == "COMPLETE"]
    top = min(trials, key=lambda t: t.value)
    assert (result["trial"], result["value"], result["params"]) == (top.number, top.value, top.params)
    champion = result["champion"]
    assert champion["version"] == "1" and champion["source_trial"] == top.number
    assert {"test_loss", "test_accuracy"} <= set(champion["test_metrics"])
    assert champion["exports"] == {"onnx": "ok", "torchscript": "ok"}
    # Re-measured on the full-scale model; the registered version carries them too.
    assert champion["deployment"]["params"] == top.user_attrs["final_metrics"]["params"]  # same architecture
    assert champion["deployment"]["latency_ms"] > 0 and result["metrics"]["latency_ms"] > 0
    text = warm_cli("best", "--study", "resmlp", cwd=retrained, check=True).stdout
    assert f"best trial {top.number}" in text and "champion: resmlp version 1" in text
    assert "  exports: onnx ok, torchscript ok" in text
    assert text.count("  deployment: ") == 2 and "ms/sample (batch 64)" in text
    from mlflow import MlflowClient

    version = MlflowClient(f"sqlite:///{retrained}/.search/mlflow.db").get_model_version("resmlp", "1")
    assert float(version.tags["hpsearch.latency_ms"]) == pytest.approx(champion["deployment"]["latency_ms"], rel=1e-5)
    assert float(version.tags["hpsearch.params"]) == champion["deployment"]["params"]


@pytest.mark.slow
def test_the_final_phase_says_what_it_does_and_the_same_command_again_trains_nothing(retrained, cli, warm_cli):
    said = (retrained / "first-start.out").read_text().splitlines()
    start = next(i for i, line in enumerate(said) if line.startswith("retraining trial "))
    assert "at full scale (3 epochs), then test, export, register" in said[start]
    steps = [line.split(":")[0].strip() for line in said[start + 1 :] if line.startswith("  ") and ": " in line]
    assert steps[:4] == ["trained", "tested", "exported", "registered"], said[start:]
    assert any(line.startswith("  epoch 3/3") and "ETA" in line for line in said[start:])  # not a terminal: lines
    again = cli(*RESMLP_START, cwd=retrained, check=True)
    assert "is finished: nothing to run" in again.stdout and "retraining trial" not in again.stdout
    assert "retrained before: model resmlp version 1" in again.stdout and "champion: version 1" in again.stdout
    best = json.loads(warm_cli("best", "--study", "resmlp", "--json", cwd=retrained, check=True).stdout)
    assert best["champion"]["version"] == "1"


@pytest.mark.slow
def test_status_of_a_finished_study_says_done_and_names_the_champion(retrained, warm_cli):
    text = warm_cli("status", "--study", "resmlp", cwd=retrained, check=True).stdout.splitlines()
    assert text[0].startswith("resmlp: 2/2 finished") and text[0].endswith("ETA done")
    assert text[1].startswith("  done; champion: resmlp version 1 (retrained trial ")
    data = json.loads(warm_cli("status", "--study", "resmlp", "--json", cwd=retrained, check=True).stdout)
    assert data["done"] is True and data["champion"]["version"] == "1"


@pytest.mark.slow
def test_the_report_shows_the_champion_and_every_trial(retrained, warm_cli):
    warm_cli("report", "--study", "resmlp", "-o", "r.html", "--no-mlflow", cwd=retrained, check=True)
    page = (retrained / "r.html").read_text()
    assert "Registered model resmlp version 1 (retrained trial" in page and "test_accuracy" in page
    assert "Exports: onnx ok, torchscript ok." in page
    assert "latency ms" in page and "FLOPs/sample" in page  # the trials table's deployment columns
    assert page.count('<tr class="complete">') + page.count('<tr class="pruned">') == 2


@pytest.mark.slow
def test_delete_asks_then_removes_the_study_its_runs_and_checkpoints_only(retrained, cli, warm_cli, search_main,
                                                                         monkeypatch):  # fmt: skip
    from mlflow import MlflowClient

    uri = f"sqlite:///{retrained / '.search' / 'mlflow.db'}"
    client = MlflowClient(uri, uri)  # the registry too: never a URI another test left behind
    flags = ["--study", "resmlp", "--project-dir", str(retrained / ".search")]
    run_ids = [r["mlflow_run_id"] for r in json.loads(search_main(["trials", *flags, "--json"])[1])]
    champion_run = client.get_model_version_by_alias("resmlp", "champion").run_id
    (retrained / ".search" / "checkpoints" / "resmlp" / "trial-1").mkdir(parents=True)  # as if left by a retry
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, _ = search_main(["delete", *flags])
    assert code == 1 and "nothing deleted" in out
    assert "delete study 'resmlp': 2 trials in the Optuna storage, 4 MLflow runs, checkpoints in" in out
    assert "registered model 'resmlp' (1 version) is kept" in out
    assert warm_cli("status", "--study", "resmlp", cwd=retrained).returncode == 0

    proc = cli("delete", "--study", "resmlp", "--yes", cwd=retrained, check=True)
    assert "deleted study 'resmlp': 2 trials" in proc.stdout
    gone = warm_cli("status", "--study", "resmlp", cwd=retrained)
    assert gone.returncode == 2 and gone.stderr.count("\n") == 1 and "does not exist" in gone.stderr
    assert client.get_experiment_by_name("resmlp") is None
    assert all(client.get_run(r).info.lifecycle_stage == "deleted" for r in [*run_ids, champion_run])
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  "tags.`hpsearch.study` = 'resmlp'")  # fmt: skip
    assert not (retrained / ".search" / "checkpoints" / "resmlp").exists()
    assert str(client.get_model_version_by_alias("resmlp", "champion").version) == "1"  # the registry is kept
    # The other study is untouched.
    assert warm_cli("status", "--study", SLEEP_STUDY, cwd=retrained).returncode == 0
    assert client.search_runs([client.get_experiment_by_name("sleep").experiment_id])


def test_trials_state_filter_and_table(demo_study, search_main):
    code, out, _ = search_main(["trials", *demo_study.flags(), "--json", "--state", "pruned"])
    assert code == 0 and [r["number"] for r in json.loads(out)] == [1, 5]
    code, out, _ = search_main(["trials", *demo_study.flags(), "--json", "--state", "pruned", "--state", "running"])
    assert [(r["number"], r["state"]) for r in json.loads(out)] == [(1, "PRUNED"), (5, "PRUNED"), (6, "RUNNING")]
    code, out, _ = search_main(["trials", *demo_study.flags(), "--csv", "--state", "complete"])
    table = list(csv.DictReader(io.StringIO(out)))
    assert [(r["number"], r["value"], r["params.width"]) for r in table] == [("0", "0.5", "64"), ("2", "0.4", "192"),
                                                                              ("4", "0.55", "320")]  # fmt: skip
    code, out, _ = search_main(["trials", *demo_study.flags()])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 8
    assert lines[3].split()[:2] == ["2", "COMPLETE"] and "lr=0.001 width=192" in lines[3]
    assert lines[4].split()[:2] == ["3", "FAIL"] and lines[4].endswith("diverged at epoch 1")
    assert lines[7].split()[:2] == ["6", "RUNNING"] and "nodeB:22:0" in lines[7]


def test_best_without_a_complete_trial_is_one_line(tmp_path, make_demo, search_main):
    import storage

    demo = make_demo(storage.sqlite_url(tmp_path / "optuna.db"), tmp_path, trials=0)
    code, out, err = search_main(["best", *demo.flags()])
    assert (code, out, err) == (2, "", "error: study 'demo' has no complete trial yet\n")


@pytest.mark.slow
def test_best_without_a_champion(faulty, search_main):
    flags = ["--name", "faulty", "--project-dir", str(faulty / ".search")]
    code, out, _ = search_main(["best", *flags, "--json"])
    result = json.loads(out)
    complete = [t for t in _optuna_trials(faulty, "faulty") if t.state.name == "COMPLETE"]
    assert code == 0 and result["trial"] == complete[0].number and result["champion"] is None
    assert "champion: none registered yet" in search_main(["best", *flags])[1]


def test_delete_refuses_while_trials_run_and_asks_first(study_url, tmp_path, make_demo, search_main, monkeypatch):
    demo = make_demo(study_url, tmp_path / "project", tracking=True)
    flags = demo.flags()
    code, _, err = search_main(["delete", *flags, "--yes"])
    assert (code, err) == (2, "error: study 'demo' has 1 running trial; stop its workers or give --force\n")
    for answer in ("n\n", ""):  # no, and no answer at all (stdin closed)
        monkeypatch.setattr("sys.stdin", io.StringIO(answer))
        code, out, _ = search_main(["delete", *flags, "--force"])
        assert code == 1 and "delete study 'demo': 7 trials in the Optuna storage, 1 MLflow runs?" in out
        assert out.rstrip().endswith("nothing deleted")
        assert search_main(["status", *flags])[0] == 0
    code, out, _ = search_main(["delete", *flags, "--force", "--yes"])
    assert code == 0 and out.splitlines() == ["deleted study 'demo': 7 trials in the Optuna storage, 1 MLflow runs"]
    code, _, err = search_main(["status", *flags])
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err


def test_delete_takes_a_study_whose_only_unfinished_trials_are_queued_retries(tmp_path, make_demo, search_main):
    """After Ctrl-C a study holds queued retries (WAITING) and no running trial: nothing to stop."""
    import storage
    from search.coordination import Coordinator

    project = tmp_path / "project"
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False, tracking=True)
    Coordinator.existing(demo.url, demo.name).load().enqueue_trial({"lr": 0.01, "width": 64})
    code, out, err = search_main(["delete", *demo.flags(), "--yes"])
    assert code == 0, err
    assert out.startswith("deleted study 'demo': 7 trials in the Optuna storage (1 of them queued)")


@pytest.mark.slow
def test_delete_removes_what_a_dead_worker_left_under_its_own_checkpoint_root(tmp_path, make_demo, cli, search_main):
    """`search worker --checkpoint-dir` on another node's disk: the root is recorded as it joins, so
    `search delete` finds the folders of a trial whose worker died there."""
    import storage
    from search.coordination import BUDGET_ATTR, Coordinator

    project, elsewhere = tmp_path / "project", tmp_path / "node-b" / "ckpt"
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False, tracking=True)
    coordinator = Coordinator.existing(demo.url, demo.name)
    coordinator.load().set_user_attr(BUDGET_ATTR, 7)  # spent: the worker joins, finds no trial, and leaves
    assert coordinator.checkpoint_roots() == []
    cli("worker", *demo.flags(), "--checkpoint-dir", str(elsewhere), cwd=tmp_path, check=True)
    assert coordinator.checkpoint_roots() == [elsewhere.resolve()]
    (elsewhere / demo.name / "trial-3").mkdir(parents=True)  # as a worker killed on that node leaves it
    code, out, err = search_main(["delete", *demo.flags(), "--yes"])
    assert code == 0 and f"checkpoints in {elsewhere.resolve() / demo.name}" in out, out + err
    assert not (elsewhere / demo.name).exists()


def test_delete_keeps_a_same_named_study_that_shares_the_experiment(tmp_path, make_demo, search_main):
    """Two studies named alike in two storages write to one MLflow experiment: only one study's runs go."""
    import storage
    from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR, Coordinator
    from search.tracking import Tracker

    project = tmp_path / "project"
    ours, theirs = (make_demo(storage.sqlite_url(project / db), project, running=False, tracking=True)
                    for db in ("optuna.db", "other.db"))  # fmt: skip
    client = Tracker(storage.resolve_tracking(None, project)).client
    runs = {}
    for demo in (ours, theirs):
        attrs = Coordinator.existing(demo.url, demo.name).load().user_attrs
        experiment, parent = str(attrs[EXPERIMENT_ATTR]), str(attrs[PARENT_RUN_ATTR])
        child = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        runs[demo.url] = {parent, child}
    code, out, _ = search_main(["delete", *ours.flags(), "--yes"])
    assert code == 0 and "6 trials in the Optuna storage, 2 MLflow runs" in out
    assert {r.info.run_id for r in client.search_runs([experiment])} == runs[theirs.url]
    assert client.get_experiment(experiment).name == "demo"
    assert all(client.get_run(r).info.lifecycle_stage == "deleted" for r in runs[ours.url])
    assert search_main(["status", *theirs.flags()])[0] == 0


def test_an_interrupted_attempt_reads_as_retried_and_its_queued_retry_shows_no_epochs(tmp_path, make_demo, search_main):
    """After Ctrl-C: the attempt is failed and queued again; the summary counts no failure, nor does the table."""
    import optuna

    import storage
    from search.coordination import Coordinator

    project = tmp_path / "project"
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False)
    study = Coordinator.existing(demo.url, demo.name).load()
    attempt = optuna.trial.create_trial(
        params={"lr": 0.01, "width": 64}, distributions=study.trials[0].distributions,
        intermediate_values={1: 0.9, 2: 0.8}, state=optuna.trial.TrialState.FAIL,
        user_attrs={"fail_reason": "interrupted"},
    )  # fmt: skip
    study.add_trial(attempt)
    number = study.trials[-1].number
    study.enqueue_trial({"lr": 0.01, "width": 64})
    retry = study.trials[-1]
    study._storage.set_trial_system_attr(retry._trial_id, "retry_history", [number])
    study._storage.set_trial_system_attr(retry._trial_id, "failed_trial", number)
    code, out, err = search_main(["trials", *demo.flags()])
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows[str(number)].split()[1] == "RETRIED" and f"interrupted; continued by trial {retry.number}" in rows[
        str(number)]  # fmt: skip
    assert rows[str(retry.number)].split()[1:4] == ["WAITING", "-", "-"]  # no value, no epochs until it resumes
    code, out, _ = search_main(["trials", *demo.flags(), "--json"])
    by_number = {row["number"]: row for row in json.loads(out)}
    assert by_number[number]["state"] == "FAIL" and by_number[number]["retried_as"] == retry.number
