"""The database goes away: a PostgreSQL restart mid-study costs nothing, an outage past the limit ends
the workers with one clear line, and the retry helper tells a lost connection from other errors.

The scenarios run ``search`` as users do, in subprocesses against the real PostgreSQL server, with
the training-free sleep study (``benchmarks/studies/sleep_study.py``: every epoch sleeps), so a
trial's length is known and a worker can be killed at a chosen epoch. Heartbeats every second and
a grace period of 3 s keep the waits short (``search_helpers.FAST``).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from search_helpers import (
    FAST,
    IN_CI,
    SLEEP_STUDY,
    StudyWatch,
    assert_exact_budget,
    clean_env,
    fresh_database,
    spawn,
    stop,
    wait_for,
)

# -- the database goes away ----------------------------------------------------------------------


@pytest.fixture
def restart_postgres(pg_server: str) -> Iterator[Callable[[], None]]:
    """Restarts the local server on demand; it is running again afterwards, whatever happened."""
    clusters = Path("/etc/postgresql")
    if shutil.which("pg_ctlcluster") is None or not clusters.is_dir():
        reason = "needs the local PostgreSQL cluster (pg_ctlcluster) to restart it"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", sorted(p.name for p in clusters.iterdir())[-1], "main"]

    def restart(down_seconds: float = 3.0) -> None:
        # Down for longer than a heartbeat and an epoch, so every worker meets the outage:
        # a restart quicker than that can pass unseen behind the pool's pre-ping.
        subprocess.run([*command, "stop", "-m", "fast"], check=True, timeout=120, capture_output=True)
        time.sleep(down_seconds)
        subprocess.run([*command, "start"], check=True, timeout=120, capture_output=True)

    try:
        yield restart
    finally:
        status = subprocess.run([*command, "status"], capture_output=True, timeout=30)
        if status.returncode != 0:
            subprocess.run([*command, "start"], check=True, timeout=120, capture_output=True)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.exclusive
def test_a_postgres_restart_mid_study_costs_nothing(pg_server, restart_postgres, tmp_path):
    with fresh_database(pg_server) as url:
        args = ["start", "--study", str(SLEEP_STUDY), "--name", "restart", "--trials", "8", "--workers", "2", *FAST,
                "--study-option", "epochs=4", "--study-option", "epoch_seconds=0.5", "--storage", url]  # fmt: skip
        start = spawn(args, tmp_path, tmp_path / "start.log")
        try:
            watch = StudyWatch(url, "restart")
            wait_for(lambda: watch.running_at(1) and any(t.state.name == "COMPLETE" for t in watch.trials()),
                      120, "a finished trial and a running one")  # fmt: skip
            restart_postgres()
            code = start.wait(timeout=240)
        finally:
            stop(start)
        trials = watch.trials()
        watch.storage.engine.dispose()
    output = (tmp_path / "start.log").read_text()
    assert code == 0, output
    assert_exact_budget(trials, 8)
    # Sleep trials cannot fail by themselves: any FAIL would be an attempt the outage cost.
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * 8, [(t.number, t.state.name) for t in trials]
    worker_logs = [p.read_text() for p in (tmp_path / ".search" / "logs").glob("worker-*.log")]
    lost = [log.count("database connection lost") for log in worker_logs]
    back = [log.count("database connection back") for log in worker_logs]
    # Each worker that was connected says so once each way; one still importing torch while the
    # server restarted (a loaded machine) connects after it and has nothing to say.
    assert any(n >= 1 for n in lost) and lost == back, (lost, back)
    assert all(n <= 2 for n in lost), lost  # one line when it goes, one when it is back, per outage
    assert all("Traceback" not in log for log in worker_logs)


@pytest.mark.postgres
@pytest.mark.slow
def test_past_the_outage_limit_workers_exit_with_one_clear_line(pg_url, tmp_path):
    import sqlalchemy

    database = pg_url.rsplit("/", 1)[1]
    args = ["start", "--study", str(SLEEP_STUDY), "--name", "outage", "--trials", "2", "--workers", "1", *FAST,
            "--study-option", "epochs=40", "--study-option", "epoch_seconds=0.5", "--db-outage-limit", "4",
            "--storage", pg_url]  # fmt: skip
    start = subprocess.Popen([sys.executable, "-m", "search", *args], cwd=tmp_path, env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    admin = sqlalchemy.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        watch = StudyWatch(pg_url, "outage")
        wait_for(lambda: watch.running_at(1), 120, "a trial to reach epoch 1")
        watch.storage.engine.dispose()
        with admin.connect() as conn:  # the database goes away for good: refused, and cut off
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                         {"d": database})  # fmt: skip
        cut_at = time.monotonic()
        _, stderr = start.communicate(timeout=90)
        log = tmp_path / ".search" / "logs" / "worker-0.log"
        worker_error = wait_for(lambda: [x for x in log.read_text().splitlines() if x.startswith("error: ")], 60,
                                 "the worker to give up")  # fmt: skip
    finally:
        stop(start)
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()
    assert start.returncode == 75  # EX_TEMPFAIL: retry later
    assert time.monotonic() - cut_at < 60
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: database unreachable for ") and "--db-outage-limit 4" in last, stderr
    assert "127.0.0.1" in last and "5432" in last
    assert worker_error[0].startswith("error: database unreachable for "), worker_error
    assert "Traceback" not in stderr + log.read_text()


# -- outages, as the retry helper sees them ------------------------------------------------------


def _lost_connection() -> Exception:
    import psycopg2
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    try:
        try:
            raise OperationalError(
                "SELECT 1", {}, psycopg2.OperationalError("server closed the connection unexpectedly")
            )
        except OperationalError as exc:
            raise StorageInternalError("An exception is raised during the commit.") from exc
    except StorageInternalError as wrapped:
        return wrapped


def test_lost_connections_are_told_from_other_errors():
    import psycopg2
    from sqlalchemy.exc import OperationalError

    from search.coordination import is_connection_error

    assert is_connection_error(_lost_connection())
    refused = psycopg2.OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')
    assert is_connection_error(OperationalError("connect", {}, refused))
    wrong_password = psycopg2.OperationalError('FATAL:  password authentication failed for user "x"')
    assert not is_connection_error(OperationalError("connect", {}, wrong_password))
    assert not is_connection_error(ValueError("a bug"))


@pytest.fixture
def fresh_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's outage record, fresh for one test (other tests never see what it leaves)."""
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())


def test_an_outage_is_ridden_out_with_one_line_when_it_starts_and_one_when_it_ends(monkeypatch, caplog, fresh_outage):
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience.time, "sleep", lambda s: None)
    failures = [_lost_connection() for _ in range(4)]

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "done"

    with caplog.at_level(logging.INFO, logger="search.coordination._resilience"):
        assert _resilience.retrying(flaky, "testing") == "done"
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "database connection lost while testing", "database connection back after 0.0 s",
    ]  # fmt: skip


def test_an_outage_past_the_limit_is_one_clear_error(monkeypatch, fresh_outage):
    from search.coordination import _resilience
    from search.exceptions import DatabaseUnavailableError

    monkeypatch.setenv(_resilience.ENV_OUTAGE_LIMIT, "0.3")

    def down() -> None:
        raise _lost_connection()

    with pytest.raises(DatabaseUnavailableError) as err:
        _resilience.retrying(down, "claiming a trial")
    assert str(err.value).startswith(
        "database unreachable for 0 s while claiming a trial (limit --db-outage-limit 0.3)"
    )
    assert str(err.value).endswith("server closed the connection unexpectedly")
