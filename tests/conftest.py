"""Shared fixtures: a real PostgreSQL database per session, and running the CLI as users do."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PG_ADMIN_URL = os.environ.get("HPSEARCH_TEST_PG", "postgresql+psycopg2://root@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parents[1]

# Tests in any folder import ``http_helpers``, which sits next to this file.
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

# Files run side by side, and a test marked `exclusive` alone (the hook is pytest's; see suite_lock.py).
from suite_lock import pytest_runtest_protocol  # noqa: E402, F401


def _pg_unavailable_reason() -> str | None:
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001
        return f"PostgreSQL not reachable at {PG_ADMIN_URL}: {str(exc).splitlines()[0]}"
    return None


@pytest.fixture(scope="session")
def pg_server() -> str:
    """Admin URL of the real server. Under CI a missing server fails the test instead of skipping it."""
    reason = _pg_unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return PG_ADMIN_URL


@pytest.fixture
def pg_databases(pg_server: str) -> Iterator[Callable[[], str]]:
    """Factory of fresh, empty databases on the real server; all dropped after the test."""
    import sqlalchemy

    admin = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    names: list[str] = []

    def create() -> str:
        name = f"hpsearch_test_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        names.append(name)
        return pg_server.rsplit("/", 1)[0] + f"/{name}"

    try:
        yield create
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(
                    sqlalchemy.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :n AND pid <> pg_backend_pid()"
                    ),
                    {"n": name},
                )
                conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def pg_url(pg_databases: Callable[[], str]) -> str:
    """A fresh, empty database on the real server for one test; dropped afterwards."""
    return pg_databases()


@pytest.fixture
def pgbouncers(pg_server: str) -> Iterator[Callable[[int], Any]]:
    """Factory of PgBouncers in transaction mode in front of the real server (``pool_size`` server
    connections per database), all stopped after the test. Under CI a missing pgbouncer fails."""
    from benchmarks.pgbouncer import PgBouncer, find_pgbouncer

    if find_pgbouncer() is None:
        reason = "pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run installs it)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    started: list[PgBouncer] = []

    def start(pool_size: int) -> PgBouncer:
        started.append(PgBouncer(pg_server, pool_size=pool_size).start())
        return started[-1]

    try:
        yield start
    finally:
        for bouncer in started:
            bouncer.stop()


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
            check: bool = False) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``python -m search ARGS`` in ``cwd`` as a user would, capturing text output."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "MLFLOW_TRACKING_URI"}
    full_env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}, **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", "search", *args], cwd=cwd, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"search {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def cli():
    return run_cli


_MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


@pytest.fixture(autouse=True)
def isolated_mlflow_uris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow keeps the tracking and registry URIs in module globals and, since ``set_tracking_uri``
    also exports it, in ``MLFLOW_TRACKING_URI`` (which hpsearch reads as the tracking default): a test
    that sets them (and ``get_registry_uri()``'s resolved default, set back, pins the registry) must
    not leak into the next."""
    for name in _MLFLOW_ENV:
        monkeypatch.setenv(name, "")  # records the value before the test, which the undo puts back
        monkeypatch.delenv(name)
    if "mlflow" not in sys.modules:
        yield
        return
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    saved = tracking._tracking_uri, registry._registry_uri
    yield
    tracking._tracking_uri, registry._registry_uri = saved
