"""docker/compose.yaml's topology without Docker, every service a real process on 127.0.0.1.

PostgreSQL holds the Optuna study and MLflow's backend store; ``mlflow server`` serves the runs, the
registry and (proxied) artifacts over HTTP; optuna-dashboard reads the study; ``search start --workers 0``
creates and follows the study while two ``search worker`` processes, each in its own directory as on
its own node, run the trials and reach MLflow only through the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from functools import partial
from pathlib import Path

import pytest
from http_helpers import answers, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

STUDY = "resmlp"
TRIALS = 4
START = ["start", "--study", STUDY, "--trials", str(TRIALS), "--workers", "0",
         "--artifact-location", f"mlflow-artifacts:/{STUDY}",  # as compose's `start` service
         "--study-option", "search_epochs=2", "--study-option", "full_epochs=2"]  # fmt: skip
SERVER_START_TIMEOUT_S = 180.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "MLFLOW_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return env


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"----- {p.name}\n{p.read_text(errors='replace')}" for p in sorted(tmp_path.glob("*.log")))


@contextmanager
def _process(cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own, its whole group stopped on the way out (uvicorn has children)."""
    cwd.mkdir(exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 0.0)):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(proc):
            time.sleep(0.2)
    proc.wait()


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader, or its zombie keeps the group alive
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _search(stack: ExitStack, *args: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    return stack.enter_context(_process([sys.executable, "-m", "search", *args], env=env, cwd=cwd, log=log))


def _wait_for(check: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, logs: Callable[[], str],
              timeout: float = SERVER_START_TIMEOUT_S) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        assert proc.poll() is None, f"{what}: the process exited with code {proc.returncode}\n{logs()}"
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{logs()}")


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def _announced_url(log: Path) -> str | None:
    lines = [line for line in log.read_text(errors="replace").splitlines() if ": http://" in line]
    return lines[0].rsplit(": ", 1)[1].strip() if lines else None


def _finish(procs: list[subprocess.Popen[bytes]], timeout: float = 300) -> list[int | None]:
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)  # stopped with its group on the way out
    return codes


@contextmanager
def _mlflow_server(backend_store: str, tmp_path: Path, logs: Callable[[], str]) -> Iterator[str]:
    """compose's `mlflow` service: PostgreSQL backend, proxied artifacts; yields its URL once /health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_store,
           "--serve-artifacts", "--artifacts-destination", str(tmp_path / "mlartifacts"),
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
    env = _env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no GenAI job consumers on two cores
    with _process(cmd, env=env, cwd=tmp_path / "mlflow", log=tmp_path / "mlflow.log") as server:
        url = f"http://127.0.0.1:{port}"
        _wait_for(lambda: answers(f"{url}/health"), server, "mlflow server /health", logs)
        yield url


def _dashboard(stack: ExitStack, env: dict[str, str], tmp_path: Path, logs: Callable[[], str]) -> str:
    """compose's `dashboard` service; returns the API URL of the study after its page answered."""
    log = tmp_path / "dashboard.log"
    proc = _search(stack, "dashboard", "--name", STUDY, "--port", str(free_port()), env=env,
                   cwd=tmp_path / "dashboard", log=log)  # fmt: skip
    _wait_for(lambda: _announced_url(log) is not None, proc, "dashboard URL", logs)
    page = str(_announced_url(log))
    status, html = _get(page)
    assert status == 200 and b"Optuna Dashboard" in html, logs()
    root = page.split("/dashboard/", 1)[0]
    [summary] = json.loads(_get(f"{root}/api/studies")[1])["study_summaries"]
    assert summary["study_name"] == STUDY, summary
    return f"{root}/api/studies/{summary['study_id']}"


def test_compose_topology_on_loopback(pg_databases, tmp_path):
    optuna_db, mlflow_db = pg_databases(), pg_databases()
    logs = partial(_logs, tmp_path)
    with ExitStack() as stack:
        tracking = stack.enter_context(_mlflow_server(mlflow_db, tmp_path, logs))
        env = _env(SEARCH_STORAGE=optuna_db, SEARCH_TRACKING_URI=tracking)
        start_log = tmp_path / "start.log"
        start = _search(stack, *START, env=env, cwd=tmp_path / "start", log=start_log)
        _wait_for(lambda: "' created; budget" in start_log.read_text(errors="replace"), start, "study created", logs)
        workers = [_search(stack, "worker", "--name", STUDY, env=env, cwd=tmp_path / f"node{i}",
                           log=tmp_path / f"worker{i}.log") for i in range(2)]  # fmt: skip
        dashboard_api = _dashboard(stack, env, tmp_path, logs)

        codes = _finish([*workers, start])
        assert codes == [0, 0, 0], f"worker, worker, start exited {codes}\n{logs()}"
        trials = _assert_budget_spent_by_workers(optuna_db, workers)
        detail = json.loads(_get(dashboard_api)[1])  # the dashboard followed the study to its end
        assert sorted(t["number"] for t in detail["trials"]) == sorted(t.number for t in trials), detail
        assert "Running" not in {t["state"] for t in detail["trials"]}
        retrain_run_id = _assert_runs_on_server(tracking, trials)
        _assert_champion_over_http(tracking, retrain_run_id, tmp_path, logs)
        assert "models:/resmlp@champion" in start_log.read_text()


def _assert_budget_spent_by_workers(storage: str, workers: list[subprocess.Popen[bytes]]) -> list:
    import optuna
    from optuna.trial import TrialState

    trials = optuna.load_study(study_name=STUDY, storage=storage).get_trials(deepcopy=False)
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    assert len(trials) == TRIALS and all(t.state in finished for t in trials), [t.state for t in trials]
    ran_by = {t.user_attrs["worker"].split(":")[1] for t in trials}  # host:pid:index
    assert ran_by <= {str(w.pid) for w in workers}, "`start --workers 0` ran trials itself"
    return trials


def _assert_runs_on_server(tracking: str, trials: list) -> str:
    """One parent run, a child run per trial and the retrain run under it; returns the retrain run's id."""
    import mlflow

    client = mlflow.MlflowClient(tracking)
    experiment = client.get_experiment_by_name(STUDY)
    assert experiment is not None and experiment.artifact_location == f"mlflow-artifacts:/{STUDY}"
    by_role: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id], max_results=100):
        by_role.setdefault(run.data.tags.get("hpsearch.role", "?"), []).append(run)
    assert sorted(by_role) == ["retrain", "study", "trial"], by_role
    [parent], [retrain], children = by_role["study"], by_role["retrain"], by_role["trial"]
    assert sorted(int(r.data.tags["hpsearch.trial"]) for r in children) == sorted(t.number for t in trials)
    assert {r.data.tags["mlflow.parentRunId"] for r in [*children, retrain]} == {parent.info.run_id}
    assert retrain.data.tags["retrain"] == "true" and parent.info.status == "FINISHED"
    return str(retrain.info.run_id)


def _assert_champion_over_http(tracking: str, retrain_run_id: str, tmp_path: Path, logs: Callable[[], str]) -> None:
    import mlflow

    client = mlflow.MlflowClient(tracking)
    assert client.get_model_version_by_alias(STUDY, "champion").run_id == retrain_run_id
    # Uploaded through the server: the model sits in its artifact destination and nowhere on the clients.
    assert list((tmp_path / "mlartifacts").rglob("MLmodel")), f"no model in the server's artifacts\n{logs()}"
    assert not [p for d in ("start", "node0", "node1") for p in (tmp_path / d).rglob("MLmodel")]
    # Downloaded from the server, the champion scores on raw digits rows what its run logged.
    accuracy, rows = _champion_test_accuracy(tracking)
    logged = client.get_run(retrain_run_id).data.metrics["test_accuracy"]
    assert abs(accuracy - logged) <= 1 / rows, (accuracy, logged)


def _champion_test_accuracy(tracking: str) -> tuple[float, int]:
    """The champion loaded as a user on another machine loads it; its accuracy on the study's test split."""
    import mlflow
    import numpy as np

    from studies._tabular import digits_table, split_indices

    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(tracking)
    mlflow.set_registry_uri(tracking)
    try:
        model = mlflow.pyfunc.load_model(f"models:/{STUDY}@champion")
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])
    table = digits_table()
    _, _, test_idx = split_indices(table.y, table.class_names, seed=0)  # the study's default seed
    logits = np.asarray(model.predict(table.x[test_idx]))
    assert logits.shape == (len(test_idx), len(table.class_names)), logits.shape
    return float((logits.argmax(axis=1) == table.y[test_idx]).mean()), len(test_idx)
