"""The same storage test against the embedded SQLite file and a real PostgreSQL database."""

from __future__ import annotations

from pathlib import Path

import pytest

import storage


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file under ``tmp_path``, or one on the real PostgreSQL server."""
    if request.param == "sqlite":
        return storage.sqlite_url(tmp_path / "optuna.db")
    return str(request.getfixturevalue("pg_url"))
