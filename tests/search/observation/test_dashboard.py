"""`search dashboard` and `search mlflow`: the right store, bound to localhost, no password shown.

The pages themselves are driven in headless Chromium in ``tests/browser``.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import storage
from search.api import resolve_locations
from search.observation import dashboard_server, mlflow_server_env

FAKE_PASSWORD = "hunter2-secret"


@contextmanager
def _serving(url: str, name: str) -> Iterator[tuple[int, str]]:
    server, page, _ = dashboard_server(url, name, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, page
    finally:
        server.shutdown()
        server.server_close()


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def test_dashboard_serves_the_study_and_its_trials(demo_study):
    url = demo_study.url.replace("root@", f"root:{FAKE_PASSWORD}@")
    with _serving(url, "demo") as (port, page):
        [summary] = _get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        assert page == f"http://127.0.0.1:{port}/dashboard/studies/{summary['study_id']}"
        detail = _get_json(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}")
        with urllib.request.urlopen(page, timeout=30) as response:
            html = response.read().decode()
    assert summary["study_name"] == "demo" and detail["objective_names"] == ["val_loss"]
    states = sorted(t["state"] for t in detail["trials"])
    assert states == ["Complete"] * 3 + ["Fail", "Pruned", "Pruned", "Running"]
    assert "Optuna Dashboard" in html and FAKE_PASSWORD not in page


@pytest.mark.slow
def test_busy_port_is_one_clear_line(sqlite_demo, cli, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for command in ("dashboard", "mlflow"):
            proc = cli(command, *sqlite_demo.flags(), "--port", str(port), cwd=tmp_path, timeout=60)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.strip() == (f"error: cannot listen on 127.0.0.1:{port}: Address already in use "
                                           "(choose another --port)")  # fmt: skip


def test_mlflow_on_a_tracking_server_prints_the_study_page(sqlite_demo, cli, tmp_path):
    server = f"http://team:{FAKE_PASSWORD}@mlflow.example:5000/"
    proc = cli("mlflow", *sqlite_demo.flags(), "--tracking-uri", server, cwd=tmp_path, timeout=60, check=True)
    assert (
        proc.stdout.strip()
        == "MLflow UI for study 'demo': http://team:***@mlflow.example:5000/#/experiments/7/runs?workflowType=machine_learning"
    )


def test_mlflow_server_gets_the_embedded_store_through_its_environment(tmp_path):
    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    env = mlflow_server_env(loc)
    assert env["MLFLOW_BACKEND_STORE_URI"] == storage.sqlite_url(tmp_path / "mlflow.db")
    artifacts = (tmp_path / "mlartifacts").as_uri()
    assert env["MLFLOW_DEFAULT_ARTIFACT_ROOT"] == env["MLFLOW_ARTIFACTS_DESTINATION"] == artifacts
