"""SQLAlchemy engines with the pool settings a long-running worker needs."""

from __future__ import annotations

import atexit
import contextlib
import sqlite3
import time
import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError

from storage._lock import MIN_HOLD_S
from storage._urls import is_postgres, is_sqlite, normalize_db_url

# Connections per worker process to the Optuna database: at most POOL_SIZE + MAX_OVERFLOW = 2, one
# engine shared by Optuna's storage and ours. Two is what a worker uses at once: the main thread (a
# claim holds the study lock on its connection, and every Optuna call and read of the holder runs on
# that one: storage._optuna_internals._bound) and the heartbeat thread (beats, and its own reaping
# pass, which takes the lock without waiting and likewise stays on one connection). No thread may
# wait for a second connection while it holds one: with two threads and two connections that could
# only deadlock if one of them did. Idle connections are what fill max_connections.
POOL_SIZE = 2
MAX_OVERFLOW = 0  # an overflow connection is closed on return and opened again: tens of ms each time
CONNECT_TIMEOUT_S = 10
# libpq TCP keepalives: a connection idle through a long epoch is probed, not silently dropped by
# a NAT or firewall. Used by Optuna's engine and added to PostgreSQL tracking URLs for MLflow's.
TCP_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
SQLITE_BUSY_TIMEOUT_S = 60
# A pooled PostgreSQL connection is pinged before use only when it sat idle this long. SQLAlchemy's
# pool_pre_ping pings at every checkout, and psycopg2's ping (SELECT 1 in autocommit, then resetting
# the session) is two server transactions and two round trips each time: most of a short trial's
# transactions. A connection used moments ago is as good as a ping; if the server went away since,
# the first statement fails as a disconnect, the pool is emptied and the caller's outage retry
# (search.coordination.retrying) runs the operation again on a fresh connection.
PING_AFTER_IDLE_S = 5.0


def engine_kwargs(url: str) -> dict[str, Any]:
    """Engine options for ``url``: pooling and TCP keepalive for PostgreSQL, a busy timeout for SQLite."""
    if is_postgres(url):
        return {
            "pool_size": POOL_SIZE,
            "max_overflow": MAX_OVERFLOW,
            "pool_pre_ping": False,  # ping_when_idle instead
            # The connection used last is handed out first: the others idle out and get pinged.
            "pool_use_lifo": True,
            # Recycle before typical server/proxy idle limits; a long epoch may idle a connection.
            "pool_recycle": 1800,
            # The claim counts trials under the study lock and must see every commit before it: a
            # database or role whose default is REPEATABLE READ or SERIALIZABLE would hand it an
            # older snapshot, and the budget would overshoot.
            "isolation_level": "READ COMMITTED",
            "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S, **TCP_KEEPALIVE, "application_name": "hpsearch"},
        }
    if is_sqlite(url):
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def create_engine(url: str) -> Engine:
    url = normalize_db_url(url)
    engine = sqlalchemy.create_engine(url, **engine_kwargs(url))
    if is_sqlite(url):
        tune_sqlite_connections()
    if is_postgres(url):
        ping_when_idle(engine)
        close_at_exit(engine)
    return engine


_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
_CLOSING = False  # _close_all is registered once, however many engines come and go


def close_at_exit(engine: Engine) -> None:
    """Close ``engine``'s pooled connections when the process exits, telling the server so: the
    CLI ends without tearing the interpreter down (``search.cli.run``), which would not."""
    global _CLOSING
    if not _CLOSING:
        atexit.register(_close_all)
        _CLOSING = True
    _ENGINES.add(engine)


def _close_all() -> None:
    for engine in list(_ENGINES):
        with contextlib.suppress(Exception):  # the process is ending; a dead server has nothing to hear
            engine.dispose()


def ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout when it sat idle :data:`PING_AFTER_IDLE_S` or more.

    A dead one is replaced before use, as with ``pool_pre_ping``: raising ``DisconnectionError``
    from a checkout listener makes the pool discard the connection and hand out another.
    """

    def on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)  # a new connection has none: nothing to check
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # noqa: BLE001 - any failure means this connection is unusable
            raise DisconnectionError(f"connection idle {time.monotonic() - since:.0f} s failed its ping") from exc
        if not alive:
            raise DisconnectionError("connection failed its ping")

    event.listen(engine, "checkin", on_checkin)
    event.listen(engine, "checkout", on_checkout)


# Set in each transaction, not once per session: behind PgBouncer in transaction mode a session's
# settings stay on whichever server connection ran them, and PgBouncer 1.18 refuses ``options``.
_SILENCE_LIMIT = "SELECT set_config('idle_in_transaction_session_timeout', '{ms}', true)"


def end_silent_transactions(engine: Engine, hold_s: Callable[[], float]) -> None:
    """Have the server end each transaction of ``engine`` whose client goes ``hold_s()`` seconds
    (at least ``MIN_HOLD_S``) without a statement, and so free the rows it locked.

    A worker frozen (SIGSTOP, a swapped-out VM, a node cut off) in the middle of one of Optuna's
    writes holds its trial's row, locked ``FOR UPDATE``, for as long as it stays frozen: TCP
    keepalives see a live peer. The reaper, which must fail that trial and queue its retry, would wait
    for that row with the study lock held, and every claim with it. With this limit the frozen
    worker's transaction ends about one grace period after its last statement, as the study lock's
    own transaction does (``storage.study_lock``); the worker, if it wakes, finds its connection gone
    and its write unmade, and retries it as after an outage. Costs one round trip per transaction.
    """

    def on_begin(conn: Any) -> None:
        # Run inside SQLAlchemy's begin (which allows statements there): psycopg2 opens the
        # transaction with this statement, and a failure is wrapped and read for a disconnect as any.
        ms = int(1000 * max(hold_s(), MIN_HOLD_S))
        conn.exec_driver_sql(_SILENCE_LIMIT.format(ms=ms))

    event.listen(engine, "begin", on_begin)


_TUNED = False


def tune_sqlite_connections() -> None:
    """Apply :func:`_sqlite_on_connect` to every SQLite connection this process opens.

    Registered on the ``Engine`` class so it also reaches engines built by libraries (MLflow's
    embedded store), which several worker processes share.
    """
    global _TUNED
    if not _TUNED:
        event.listen(Engine, "connect", _sqlite_on_connect)
        _TUNED = True


def _sqlite_on_connect(dbapi_conn: object, _record: object) -> None:
    if not isinstance(dbapi_conn, sqlite3.Connection):
        return
    cursor = dbapi_conn.cursor()
    # WAL lets readers (status, dashboard) run while a worker writes; with WAL, synchronous=NORMAL
    # cannot corrupt the file (a power cut may lose the last commits) and makes commits ~10x cheaper.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
    cursor.close()
