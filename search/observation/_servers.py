"""Web views of a study: optuna-dashboard on its storage, and the MLflow UI on its tracking store.

Both bind to 127.0.0.1 unless told otherwise, and print a URL that never carries a password:
database URLs go to servers as objects or through the environment, never through argv.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from search.exceptions import SearchError

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations

MLFLOW_START_TIMEOUT_S = 120.0


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # the dashboard loads data with several requests at once


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


def url_host(host: str) -> str:
    """The host to put in a URL for a server bound to ``host``."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def dashboard_url(coordinator: Coordinator, host: str, port: int) -> str:
    """optuna-dashboard's page of this one study."""
    study_id = coordinator.study_id()
    return f"http://{url_host(host)}:{port}/dashboard/studies/{study_id}"


def dashboard_server(url: str, study_name: str, host: str, port: int,
                     debug: bool = False) -> tuple[WSGIServer, str, str | None]:  # fmt: skip
    """A listening (not yet serving) optuna-dashboard server on the study's storage, its page URL, and
    what it leaves out of a large study (None when it shows every trial)."""
    import optuna_dashboard

    from search.coordination import Coordinator
    from search.observation._dashboard_view import DashboardView, dashboard_storage

    coordinator = Coordinator(url, study_name)  # a storage of its own: no heartbeats, no reaping
    goal = _name_the_objective(coordinator)
    view = DashboardView(coordinator.storage, coordinator.study_id(), goal.maximize)
    note = None
    if view.drawn():
        note = (f"the study has {view.total:,} trials: the dashboard shows about {view.shown:,} of them (every trial "
                "that improved on the best so far, the best 100, the running ones and an even sample of the "
                "rest) and every trial created from now on; `search trials` lists them all")  # fmt: skip
    app = optuna_dashboard.wsgi(dashboard_storage(coordinator.storage, view))
    try:
        server = make_server(host, port, app, server_class=_ThreadingServer,
                             handler_class=WSGIRequestHandler if debug else _QuietHandler)  # fmt: skip
    except OSError as exc:
        raise SearchError(f"cannot listen on {host}:{port}: {exc.strerror} (choose another --port)") from None
    return server, dashboard_url(coordinator, host, server.server_port), note


def serve_dashboard(url: str, study_name: str, host: str, port: int, announce: Callable[[str], None],
                    debug: bool = False) -> None:  # fmt: skip
    """Serve optuna-dashboard until interrupted; ``announce`` gets the study's page URL."""
    server, page, note = dashboard_server(url, study_name, host, port, debug)
    with server, _stop_on_sigterm(), suppress(KeyboardInterrupt):
        announce(page if note is None else f"{page}\n{note}")
        server.serve_forever(poll_interval=0.5)


def _name_the_objective(coordinator: Coordinator) -> Any:
    """Show ``val_loss`` rather than ``Objective 0`` on the dashboard's axes (written once per study);
    the study's first objective."""
    import optuna

    record = coordinator.read_record()
    study = optuna.load_study(study_name=coordinator.study_name, storage=coordinator.storage)
    if study.metric_names is None:
        with suppress(Exception):  # a read-only database still gets a dashboard
            study.set_metric_names([o.metric for o in record.goals()])
    return record.goals()[0]


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """``kill`` stops a server as Ctrl-C does: cleanly, children included."""

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- MLflow UI ------------------------------------------------------------------------------


def experiment_path(coordinator: Coordinator) -> str:
    """The MLflow UI's fragment for the study's experiment (its training runs)."""
    from search.coordination import EXPERIMENT_ATTR

    study_id = coordinator.study_id()
    experiment_id = coordinator.storage.get_study_user_attrs(study_id).get(EXPERIMENT_ATTR)
    # MLflow 3's UI opens in its GenAI view (traces, judges, prompts) unless the page asks for the
    # model-training one, which lists runs with their metrics: a study's trials.
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning" if experiment_id else "/"


def check_port_free(host: str, port: int) -> None:
    """One clear line now rather than a server that dies on start with a bind error in its log."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SearchError(f"cannot listen on {host}:{port}: {exc.strerror} (choose another --port)") from None


def mlflow_server_env(loc: Locations) -> dict[str, str]:
    """The server's store settings, passed through the environment so a password never shows in ``ps``."""
    env = {
        "MLFLOW_BACKEND_STORE_URI": loc.tracking_uri,
        # Job execution (GenAI evaluation) spawns a pool of consumers this UI has no use for.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": os.environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"),
    }
    if loc.artifact_location:
        # New experiments (created through this UI) put artifacts where the search's workers put theirs.
        env["MLFLOW_DEFAULT_ARTIFACT_ROOT"] = loc.artifact_location
        env["MLFLOW_ARTIFACTS_DESTINATION"] = loc.artifact_location
    return env


def serve_mlflow(loc: Locations, fragment: str, host: str, port: int, announce: Callable[[str], None]) -> int:
    """Run ``mlflow server`` on the study's tracking store until interrupted; returns its exit code."""
    log_path = loc.project_dir / "logs" / "mlflow-ui.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port), "--workers", "1"]
    with open(log_path, "ab") as log, _stop_on_sigterm():
        # A session of its own: the server's uvicorn child is stopped with it, as a group.
        proc = subprocess.Popen(cmd, env={**os.environ, **mlflow_server_env(loc)}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            _wait_until_up(proc, f"http://{url_host(host)}:{port}/health", log_path)
            announce(f"http://{url_host(host)}:{port}{fragment}")
            return proc.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            _stop_group(proc)


def serve_model(loc: Locations, model_uri: str, host: str, port: int, announce: Callable[[str], None]) -> int:
    """Run MLflow's model server (``mlflow models serve``) on ``model_uri`` until interrupted; its exit code.

    ``--env-manager local``: the model runs in this Python environment (the one that trained it), no
    conda or virtualenv is built. MLflow starts uvicorn from ``PATH``: this environment's scripts go first.
    """
    log_path = loc.project_dir / "logs" / "model-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "--model-uri", model_uri, "--env-manager", "local",
           "--host", host, "--port", str(port)]  # fmt: skip
    env = {**os.environ, "MLFLOW_TRACKING_URI": loc.tracking_uri, "MLFLOW_REGISTRY_URI": loc.tracking_uri,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}  # fmt: skip
    with open(log_path, "ab") as log, _stop_on_sigterm():
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_until_up(proc, f"http://{url_host(host)}:{port}/ping", log_path, "mlflow models serve")
            announce(f"http://{url_host(host)}:{port}")
            return proc.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            _stop_group(proc)


def _wait_until_up(proc: subprocess.Popen[bytes], health: str, log_path: Path, what: str = "mlflow server") -> None:
    deadline = time.monotonic() + MLFLOW_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SearchError(f"{what} exited with code {proc.returncode}: {_last_line(log_path)} "
                              f"(see {log_path})")  # fmt: skip
        try:
            with urllib.request.urlopen(health, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SearchError(f"{what} did not answer within {MLFLOW_START_TIMEOUT_S:.0f} s (see {log_path})")


def _last_line(path: Path) -> str:
    import storage

    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return storage.mask(lines[-1].strip()) if lines else "no output"


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group; SIGKILL to whatever is left of it after 10 s."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and _group_alive(proc):
        time.sleep(0.2)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap our own child, or it would keep its group alive as a zombie
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True
