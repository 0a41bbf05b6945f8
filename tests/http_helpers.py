"""A free local port, and whether a URL answers: for tests that start servers (``search serve``,
``mlflow server``, optuna-dashboard). ``tests/conftest.py`` puts this folder on ``sys.path``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str, timeout: float = 5) -> bool:
    """Whether a GET of ``url`` comes back 200 within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def serve_mlflow(port: int, store: Path, log: Path) -> subprocess.Popen[bytes]:
    """``mlflow server`` on 127.0.0.1:``port`` over the SQLite file ``store``, in a process group of
    its own (:func:`stop_server`), once its /health answers."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{store}",
           "--artifacts-destination", str(store.parent / "artifacts")]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()  # exited: the port was taken, say
        if answers(f"http://127.0.0.1:{port}/health", timeout=2):
            time.sleep(0.5)  # the one serving may be another's, on the same port: ours then exits
            assert proc.poll() is None, log.read_text()
            return proc
        time.sleep(0.3)
    stop_server(proc)
    raise AssertionError(f"the MLflow server did not start:\n{log.read_text()}")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """End a server started in a process group of its own, and its workers with it."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
