"""Through PgBouncer in transaction mode, where consecutive transactions of one client may run on
different server connections and one server connection serves many clients: nothing the storage
layer sets may outlive its transaction (the study lock's limits, the isolation level), and
Optuna's own storage works unchanged."""

from __future__ import annotations

import pytest
import sqlalchemy

pytestmark = pytest.mark.postgres

SETTINGS = sqlalchemy.text(
    "SELECT pg_backend_pid(), current_setting('idle_in_transaction_session_timeout'), "
    "current_setting('lock_timeout'), current_setting('transaction_isolation'), "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())"
)


def test_the_study_lock_leaves_nothing_on_the_server_connection_the_next_client_gets(pg_url, pgbouncers):
    import storage

    with sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT").connect() as admin:
        # A database whose default is not the READ COMMITTED the claim needs (storage._engine).
        name = pg_url.rsplit("/", 1)[1]
        admin.execute(sqlalchemy.text(f'ALTER DATABASE "{name}" SET default_transaction_isolation = "repeatable read"'))
    bouncer = pgbouncers(1)  # one server connection: every client below gets the same one
    url = bouncer.url(pg_url)
    engine = storage.create_engine(url)
    with storage.study_lock(engine, url, "s", hold_s=7) as conn:
        pid, idle_limit, lock_limit, isolation, advisory = conn.execute(SETTINGS).one()
    assert (idle_limit, lock_limit, isolation, advisory) == ("7s", "7s", "read committed", 1)
    engine.dispose()

    other = sqlalchemy.create_engine(url, poolclass=sqlalchemy.NullPool)  # another client, no settings
    with other.connect() as conn:
        after = conn.execute(SETTINGS).one()
        default = conn.execute(sqlalchemy.text("SHOW default_transaction_isolation")).scalar()
    other.dispose()
    assert after[0] == pid  # the same server connection
    assert after[1:] == ("0", "0", "repeatable read", 0)  # no limit, no lock, not our isolation level
    assert default == "repeatable read"  # READ COMMITTED came with each BEGIN, not as a session setting


def test_optunas_storage_and_the_claims_write_work_through_pgbouncer(pg_url, pgbouncers):
    import optuna

    import storage

    bouncer = pgbouncers(2)
    url = bouncer.url(pg_url)
    backend = storage.open_optuna_storage(url, heartbeat_interval=1, grace_period=5)
    study = optuna.create_study(study_name="s", storage=backend)
    engine = storage.create_engine(url)
    with storage.study_lock(engine, url, "s") as conn:
        trial_id = storage.create_running_trial(conn, study._study_id)
    backend.record_heartbeat(trial_id)
    backend.set_trial_state_values(trial_id, optuna.trial.TrialState.COMPLETE, [0.5])
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 4
    assert bouncer.server_connections(pg_url.rsplit("/", 1)[1]) <= 2
    engine.dispose()
    backend.engine.dispose()
