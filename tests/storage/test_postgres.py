"""Against the real PostgreSQL server: connection errors, and the study lock."""

import socket
import threading
import time
from pathlib import Path

import pytest

import storage
from storage import StorageError

pytestmark = pytest.mark.postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_names_host_and_port(pg_server):
    port = _free_port()
    with pytest.raises(StorageError) as err:
        storage.check_connection(f"postgresql://root:hunter2@127.0.0.1:{port}/test")
    assert str(err.value) == f"cannot reach PostgreSQL at 127.0.0.1:{port} (connection refused)"
    assert "hunter2" not in str(err.value)


def test_missing_database_is_named(pg_server):
    with pytest.raises(StorageError, match="database 'no_such_db_hpsearch' does not exist"):
        storage.check_connection("postgresql://root@127.0.0.1:5432/no_such_db_hpsearch")


@pytest.mark.slow
def test_silent_server_times_out_within_connect_timeout(pg_server):
    # A listener that accepts TCP but never speaks: what a hung or firewalled server looks like.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(StorageError, match=f"127.0.0.1:{port} did not answer within 10 s"):
            storage.check_connection(f"postgresql://root:pw@127.0.0.1:{port}/test")
    finally:
        listener.close()
    assert time.monotonic() - started < 15


def test_study_lock_is_exclusive_across_connections(pg_url):
    engine = storage.create_engine(pg_url)
    inside = []
    overlap = []

    def hold(i: int) -> None:
        with storage.study_lock(engine, pg_url, "s"):
            inside.append(i)
            if len(inside) > 1:
                overlap.append(i)
            time.sleep(0.05)
            inside.remove(i)

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.dispose()
    assert overlap == []


def _connections_to(admin_url: str, database: str) -> int:
    import sqlalchemy

    engine = sqlalchemy.create_engine(admin_url)
    with engine.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"
        count = conn.execute(sqlalchemy.text(query), {"d": database}).scalar_one()
    engine.dispose()
    return int(count)


def test_a_busy_worker_holds_a_bounded_number_of_connections(pg_server, pg_databases, tmp_path, monkeypatch):
    """Eight threads hammering Optuna's and MLflow's stores at once stay inside each store's pool bound."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from search.tracking import Tracker

    for name in ("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE", "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW"):
        monkeypatch.delenv(name, raising=False)
    optuna_url, mlflow_url = pg_databases(), pg_databases()
    optuna_storage = storage.open_optuna_storage(optuna_url)
    tracker = Tracker(storage.resolve_tracking(mlflow_url, Path(tmp_path)))
    experiment = tracker.experiment_id("busy")

    def work(_: int) -> None:
        for _ in range(15):
            optuna_storage.get_all_studies()
            tracker.client.search_runs([experiment], max_results=5)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert 1 <= _connections_to(pg_server, optuna_url.rsplit("/", 1)[1]) <= storage.POOL_SIZE + storage.MAX_OVERFLOW
    tracking_bound = storage.TRACKING_POOL_SIZE + storage.TRACKING_MAX_OVERFLOW
    assert 1 <= _connections_to(pg_server, mlflow_url.rsplit("/", 1)[1]) <= tracking_bound
    assert "keepalives=1" in tracker.location.tracking_uri


@pytest.mark.slow
def test_a_database_whose_default_isolation_is_repeatable_read_still_claims_exactly(pg_server, pg_url, tmp_path, cli):
    """The claim's count must see every commit: our connections run at READ COMMITTED whatever the
    database's or role's default, and a search on such a database spends exactly its budget."""
    import optuna
    import sqlalchemy

    import storage

    database = pg_url.rsplit("/", 1)[1]
    admin = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" SET default_transaction_isolation = '
                                     "'repeatable read'"))  # fmt: skip
    admin.dispose()
    plain = sqlalchemy.create_engine(pg_url)
    with plain.connect() as conn:  # the trap is set: a plain connection gets the old snapshot semantics
        assert conn.execute(sqlalchemy.text("SHOW transaction_isolation")).scalar() == "repeatable read"
    plain.dispose()
    ours = storage.create_engine(pg_url)
    with ours.connect() as conn:
        assert conn.execute(sqlalchemy.text("SHOW transaction_isolation")).scalar() == "read committed"
    ours.dispose()
    optuna_storage = storage.open_optuna_storage(pg_url)
    with optuna_storage.engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("SHOW transaction_isolation")).scalar() == "read committed"
    optuna_storage.engine.dispose()

    sleep_study = str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "sleep_study.py")
    cli("start", "--study", sleep_study, "--trials", "8", "--workers", "2", "--pruner", "none", "--no-retrain",
        "--study-option", "epoch_seconds=0", "--storage", pg_url, cwd=tmp_path, check=True)  # fmt: skip
    study = optuna.load_study(study_name="sleep", storage=pg_url)
    assert len([t for t in study.trials if t.state.name == "COMPLETE"]) == 8 and len(study.trials) == 8


def test_a_pooled_connection_is_pinged_only_after_idling_and_replaced_when_dead(pg_server, pg_url, monkeypatch):
    """Back-to-back checkouts reuse the connection without a ping (psycopg2's costs two server
    transactions); one idle past the bound is pinged, and one the server dropped meanwhile is
    replaced before the caller sees it."""
    import sqlalchemy

    from storage import _engine

    monkeypatch.setattr(_engine, "PING_AFTER_IDLE_S", 0.3)
    engine = storage.create_engine(pg_url)
    pings = []
    ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: pings.append(1) or ping(conn))
    pids = set()
    for _ in range(20):
        with engine.connect() as conn:
            pids.add(conn.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar_one())
    assert len(pids) == 1 and pings == []
    time.sleep(0.5)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar_one() in pids
    assert pings == [1]

    admin = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(:p)"), {"p": pids.pop()})
    admin.dispose()
    time.sleep(0.5)
    with engine.connect() as conn:  # no error: the dead connection failed its ping and was replaced
        assert conn.execute(sqlalchemy.text("SELECT 1")).scalar_one() == 1
    engine.dispose()
