"""docker/postgres/initdb/: the script the postgres image runs on a new volume, run here against
the real server the way the image runs it (psql as POSTGRES_USER on POSTGRES_DB)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "postgres" / "initdb" / "10-mlflow-database.sh"
HOST, PORT = "127.0.0.1", 5432
ADMIN = os.environ.get("PGUSER", "postgres")


def _server_reachable() -> bool:
    try:
        socket.create_connection((HOST, PORT), timeout=2).close()
    except OSError:
        return False
    return shutil.which("psql") is not None


def psql(sql: str) -> str:
    env = {**os.environ, "PGHOST": HOST, "PGPORT": str(PORT)}
    command = ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-U", ADMIN, "-d", "postgres", "-c", sql]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout.strip()


def run_script(postgres_db: str, mlflow_db: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ, "PGHOST": HOST, "PGPORT": str(PORT),
        "POSTGRES_USER": ADMIN, "POSTGRES_DB": postgres_db, "MLFLOW_DB": mlflow_db,
    }  # fmt: skip
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def database_name() -> Iterator[str]:
    if not _server_reachable():
        message = f"no PostgreSQL server (and psql) on {HOST}:{PORT}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    name = f"hpsearch_initdb_{uuid.uuid4().hex[:12]}"
    yield name
    psql(f'DROP DATABASE IF EXISTS "{name}"')


def test_creates_mlflow_database_owned_by_postgres_user(database_name: str) -> None:
    result = run_script("postgres", database_name)
    assert result.returncode == 0, result.stderr
    owner = psql(f"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{database_name}'")
    assert owner == ADMIN


def test_refuses_to_share_the_optuna_database(database_name: str) -> None:
    result = run_script(database_name, database_name)
    assert result.returncode != 0
    assert "alembic_version" in result.stderr
    assert psql(f"SELECT count(*) FROM pg_database WHERE datname = '{database_name}'") == "0"
