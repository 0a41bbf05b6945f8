"""A free local port, and whether a URL answers: for tests that start servers (``search serve``,
``mlflow server``, optuna-dashboard). ``tests/conftest.py`` puts this folder on ``sys.path``."""

from __future__ import annotations

import socket
import urllib.request


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
