"""Opening the Optuna storage, with clear errors when the database cannot be used."""

from __future__ import annotations

import logging
import re
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from storage._engine import (
    CONNECT_TIMEOUT_S,
    close_at_exit,
    create_engine,
    end_silent_transactions,
    engine_kwargs,
    ping_when_idle,
    tune_sqlite_connections,
)
from storage._errors import StorageError
from storage._lock import DEFAULT_HOLD_S
from storage._optuna_internals import ensure_indexes, versions_on_demand
from storage._urls import describe, host_port, is_postgres, is_sqlite, mask, normalize_db_url, sqlite_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from optuna.storages import RDBStorage

log = logging.getLogger(__name__)


def check_connection(url: str) -> None:
    """Connect once (within the connect timeout) and raise :class:`StorageError` with one clear line."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise StorageError(explain_db_error(url, exc)) from None
    finally:
        engine.dispose()


def has_optuna_tables(url: str) -> bool:
    """Whether the database at ``url`` holds Optuna's tables; creates nothing (opening a storage would)."""
    url = normalize_db_url(url)
    if is_sqlite(url) and not sqlite_path(url).exists():
        return False
    engine = create_engine(url)
    try:
        return sqlalchemy.inspect(engine).has_table("studies")
    except SQLAlchemyError as exc:
        raise StorageError(explain_db_error(url, exc)) from None
    finally:
        engine.dispose()


def explain_db_error(url: str, exc: BaseException) -> str:
    """One line saying what went wrong, naming host and port and never the password."""
    raw = str(getattr(exc, "orig", None) or exc)
    where = describe(url)
    if is_postgres(url):
        host, port = host_port(url)
        user_match = re.search(r'for user "([^"]+)"', raw)
        db_match = re.search(r'database "([^"]+)" does not exist', raw)
        if "password authentication failed" in raw:
            user = user_match.group(1) if user_match else "?"
            return f"PostgreSQL at {host}:{port} rejected the password for user {user!r}"
        if "no password supplied" in raw:
            return f"PostgreSQL at {host}:{port} asks for a password: set PGPASSWORD or ~/.pgpass"
        if db_match:
            name = db_match.group(1)
            return f"database {name!r} does not exist on PostgreSQL at {host}:{port} (createdb {name})"
        if "timeout expired" in raw:
            return f"PostgreSQL at {host}:{port} did not answer within {CONNECT_TIMEOUT_S} s"
        if "could not translate host name" in raw:
            return f"unknown database host {host!r}"
        if "Connection refused" in raw or "could not connect" in raw or "server closed" in raw:
            return f"cannot reach PostgreSQL at {host}:{port} (connection refused)"
        if 'role "' in raw and "does not exist" in raw:
            return f"PostgreSQL at {host}:{port}: {mask(raw.splitlines()[0].split('FATAL:')[-1].strip())}"
    first = mask(raw.strip().splitlines()[0]) if raw.strip() else type(exc).__name__
    return f"cannot use database {where}: {first}"


def open_optuna_storage(
    url: str,
    *,
    heartbeat_interval: int | None = None,
    grace_period: int | None = None,
    stale_trial_callback: Callable[..., None] | None = None,
    schema_checked: bool = False,
) -> RDBStorage:
    """An Optuna ``RDBStorage`` for ``url`` with pooled keepalive connections, pinged after idling.

    ``schema_checked``: the process that started this one has just opened ``url`` in full (creating
    Optuna's tables, or checking that their schema is this Optuna's), so they are neither created
    nor checked again, and Optuna's schema-version bookkeeping (Alembic's import and its revision
    read, 0.3-0.6 s of a worker's start) is made only if something asks for it. Opened in full, the
    project's indexes on Optuna's tables are made if missing (``storage._optuna_internals.INDEXES``).
    """

    url = normalize_db_url(url)
    if is_sqlite(url):
        tune_sqlite_connections()
    # Optuna's own schema check reads the schema's revision on a second connection while its first
    # holds a transaction open: behind PgBouncer, workers starting together can each hold one of its
    # few server connections and wait for another for ever. check_schema reads one at a time.
    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs(url), "skip_compatibility_check": True}
    if schema_checked:
        kwargs.update(skip_table_creation=True)
    if heartbeat_interval:
        kwargs.update(
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            heartbeat_stale_trial_callback=stale_trial_callback,
        )
    try:
        with versions_on_demand() if schema_checked else nullcontext():
            storage = _first_open(url, kwargs)
        if not schema_checked:
            check_schema(storage, url)
    except (DBAPIError, SQLAlchemyError) as exc:
        raise StorageError(explain_db_error(url, exc)) from None
    if not schema_checked:
        try:
            ensure_indexes(storage.engine)
        except (DBAPIError, SQLAlchemyError) as exc:
            raise StorageError(explain_db_error(url, exc)) from None
    if is_postgres(url):
        ping_when_idle(storage.engine)
        # The study lock's hold time: a frozen worker's rows are free by the time it counts as dead.
        end_silent_transactions(storage.engine, lambda: float(storage.grace_period or DEFAULT_HOLD_S))
        close_at_exit(storage.engine)
    return storage


_CREATION_RACE = ("already exists", "alembic_version", "duplicate key", "database is locked")
"""What the loser of two processes creating Optuna's tables in one new database at once sees."""


def _first_open(url: str, kwargs: dict[str, Any], attempts: int = 5) -> RDBStorage:
    """``RDBStorage(url, **kwargs)``; when another process creates Optuna's tables in a new database
    at the same moment (``search start`` beside ``search status`` in a fresh project), the loser's
    ``CREATE TABLE`` or schema-version row fails (``_CREATION_RACE``): the winner's tables are there
    once it commits, so open again."""
    import time

    from optuna.storages import RDBStorage

    for attempt in range(attempts - 1):
        try:
            return RDBStorage(url, **kwargs)
        except (DBAPIError, SQLAlchemyError) as exc:
            if not any(sign in str(exc) for sign in _CREATION_RACE):
                raise
            time.sleep(0.2 * (attempt + 1))
    return RDBStorage(url, **kwargs)  # the last attempt: any error is the caller's


def check_schema(storage: RDBStorage, url: str) -> None:
    """Optuna's compatibility check (``RDBStorage.check_table_schema_compatibility``), one connection
    at a time: :class:`StorageError` for tables of an Optuna this one does not read."""
    import optuna

    current, head = storage.get_current_version(), storage.get_head_version()
    if current == head:
        return
    advice = (
        "Please execute `$ optuna storage upgrade --storage $STORAGE_URL` for upgrading the storage."
        if current in storage.get_all_versions()
        else "Please try updating optuna to the latest version by `$ pip install -U optuna`."
    )
    raise StorageError(
        f"cannot use database {describe(url)}: The runtime optuna version {optuna.__version__} is no longer "
        f"compatible with the table schema (its revision {current}, this Optuna's {head}). {advice}"
    )
