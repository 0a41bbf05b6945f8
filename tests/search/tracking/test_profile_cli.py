"""`search profile`: a trial's configuration under torch.profiler, its trace and table logged on its run."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_profile_of_the_best_trial_writes_and_logs_trace_and_table(cli, tmp_path):
    from mlflow import MlflowClient

    cli("start", "--study", "resmlp", "--trials", "1", "--workers", "1", "--study-option", "search_epochs=1",
        "--no-retrain", cwd=tmp_path, check=True)  # fmt: skip
    proc = cli("profile", "--study", "resmlp", "--steps", "3", "-o", "prof", cwd=tmp_path, check=True)
    assert "profiled trial 0: 6 optimizer steps" in proc.stdout
    assert "aten::" in proc.stdout  # the top operators
    trace = json.loads((tmp_path / "prof" / "trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::addmm" in names or "aten::mm" in names
    assert sum(1 for n in names if str(n).startswith("ProfilerStep#")) == 3  # the active steps only
    assert "Self CPU" in (tmp_path / "prof" / "top_operators.txt").read_text()

    uri = f"sqlite:///{tmp_path / '.search' / 'mlflow.db'}"
    client = MlflowClient(uri, uri)  # the registry too: never a URI another test left behind
    run_id = proc.stdout.split("MLflow run ")[1].split()[0]
    assert client.get_run(run_id).data.tags["hpsearch.trial"] == "0"
    assert {a.path for a in client.list_artifacts(run_id, "profile")} == {
        "profile/trace.json",
        "profile/top_operators.txt",
    }
    assert client.get_run(run_id).data.metrics["profile_samples_per_second"] > 0


@pytest.mark.slow
def test_profile_of_a_trial_that_does_not_exist_is_one_line(cli, tmp_path):
    cli("start", "--study", "resmlp", "--trials", "1", "--workers", "1", "--study-option", "search_epochs=1",
        "--no-retrain", cwd=tmp_path, check=True)  # fmt: skip
    proc = cli("profile", "--study", "resmlp", "--trial", "9", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: study 'resmlp' has no trial 9"
