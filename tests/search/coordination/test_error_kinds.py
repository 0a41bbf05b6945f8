"""Errors from a live database are not outages: only a lost or refused connection is ridden out.

Each error comes from the real thing: a SQLite file held by another connection, a PostgreSQL
statement timeout, a PostgreSQL deadlock between two sessions.
"""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy


@pytest.fixture
def fresh_outage(monkeypatch: pytest.MonkeyPatch):
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())
    monkeypatch.setenv(_resilience.ENV_OUTAGE_LIMIT, "3")
    return _resilience


def test_sqlite_database_is_locked_is_an_error_not_an_outage(tmp_path, fresh_outage):
    path = tmp_path / "locked.db"
    holder = sqlalchemy.create_engine(f"sqlite:///{path}", isolation_level=None)
    other = sqlalchemy.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.1})
    with holder.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        conn.exec_driver_sql("BEGIN EXCLUSIVE")

        def write() -> None:
            with other.begin() as c:
                # storage's engines set a 60 s busy timeout on every SQLite connection of the process
                c.exec_driver_sql("PRAGMA busy_timeout = 100")
                c.exec_driver_sql("INSERT INTO t VALUES (1)")

        with pytest.raises(sqlalchemy.exc.OperationalError, match="database is locked") as err:
            fresh_outage.retrying(write, "writing")
        conn.exec_driver_sql("ROLLBACK")
    assert not fresh_outage.is_connection_error(err.value)
    assert fresh_outage.OUTAGE.since is None


@pytest.mark.postgres
def test_a_statement_timeout_is_an_error_not_an_outage(pg_url, fresh_outage):
    import storage

    engine = storage.create_engine(pg_url)

    def slow() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET statement_timeout = 50")
            conn.exec_driver_sql("SELECT pg_sleep(2)")

    with pytest.raises(sqlalchemy.exc.OperationalError, match="statement timeout") as err:
        fresh_outage.retrying(slow, "reading")
    engine.dispose()
    assert not fresh_outage.is_connection_error(err.value)
    assert fresh_outage.OUTAGE.since is None


@pytest.mark.postgres
def test_a_deadlock_victim_runs_again_without_an_outage(pg_url, fresh_outage, caplog):
    import storage

    engine = storage.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1, 0), (2, 0)")
    first_locked, second_locked = threading.Event(), threading.Event()
    runs: list[int] = []

    def other_session() -> None:  # locks row 1, then wants row 2
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE t SET v = v + 1 WHERE id = 1")
            first_locked.set()
            second_locked.wait(30)
            conn.exec_driver_sql("UPDATE t SET v = v + 1 WHERE id = 2")

    def ours() -> None:  # locks row 2, then wants row 1; its shorter deadlock_timeout makes it the victim
        runs.append(1)
        with engine.begin() as conn:
            conn.exec_driver_sql("SET deadlock_timeout = 100")
            conn.exec_driver_sql("UPDATE t SET v = v + 10 WHERE id = 2")
            if len(runs) == 1:
                first_locked.wait(30)
                second_locked.set()
            conn.exec_driver_sql("UPDATE t SET v = v + 10 WHERE id = 1")

    other = threading.Thread(target=other_session)
    other.start()
    first_locked.wait(30)
    with caplog.at_level(logging.INFO, logger="search.coordination._resilience"):
        fresh_outage.retrying(ours, "updating")
    other.join(30)
    with engine.connect() as conn:
        values = dict(conn.exec_driver_sql("SELECT id, v FROM t").fetchall())
    engine.dispose()
    assert "connection lost" not in caplog.text
    assert fresh_outage.OUTAGE.since is None
    assert len(runs) == 2  # the victim ran again
    assert values == {1: 11, 2: 11}  # and both sessions' updates landed once
