"""Optuna's storage calls made under the study lock, on the lock's own connection.

A thread that holds the study lock on PostgreSQL and asks Optuna's storage for something (the
reaper failing a dead trial and queueing its retry, a worker failing its own trial) would otherwise
take a second connection from the pool while the first holds the lock in an open transaction.
Behind PgBouncer in transaction mode every worker waiting for the lock holds one of its few server
connections, so that second connection may never come and the study stalls until the server ends
the holder's transaction (one grace period), again for each holder. Bound to the lock's
connection, those calls need none, and their writes commit with the lock's release, only if the
lock was held throughout (each call in a savepoint of its own, so a call Optuna rolls back rolls
back alone).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from sqlalchemy.engine import Connection, Engine

_LOCAL = threading.local()


@contextlib.contextmanager
def bound_to(storage: RDBStorage | None, conn: Connection | None) -> Iterator[None]:
    """While held, this thread's calls on ``storage`` (and :func:`bind_of` it) use ``conn``.

    Other threads (a heartbeat) keep their own sessions. A no-op without a connection (SQLite) or a
    storage.
    """
    if storage is None or conn is None:
        yield
        return
    from sqlalchemy.orm import Session

    registry = storage.scoped_session.registry  # Optuna's per-thread sessions
    saved = registry() if registry.has() else None
    session = Session(bind=conn, join_transaction_mode="create_savepoint")
    registry.set(session)
    bound: dict[int, Connection] = _LOCAL.__dict__.setdefault("bound", {})
    bound[id(storage)] = conn
    try:
        yield
    finally:
        bound.pop(id(storage), None)
        with contextlib.suppress(Exception):  # a lost connection: the lock's own error says so
            session.close()
        if saved is None:
            registry.clear()
        else:
            registry.set(saved)


def bind_of(storage: RDBStorage) -> Engine | Connection:
    """Where this thread's reads of ``storage``'s tables go: the study lock's connection while it
    holds the lock (:func:`bound_to`), else the storage's engine."""
    return _LOCAL.__dict__.get("bound", {}).get(id(storage), storage.engine)
