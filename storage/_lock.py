"""A study-wide mutex: claiming a trial (count, then create) must not interleave across workers.

On PostgreSQL the lock is a transaction-scoped advisory lock, taken in a transaction that the
server ends by itself when its holder goes quiet: ``idle_in_transaction_session_timeout`` is set
for that transaction alone. A holder that freezes (SIGSTOP, a swapped-out VM, a node that lost its
network) therefore blocks the study for at most ``hold_s`` seconds, not until TCP notices a dead
peer (hours by default). A holder that waits on a row lock instead (another session holds the
study's row) gives up as long after: ``lock_timeout`` is set for the transaction too, once the lock
is held. Writes made on the lock's own connection commit only if the lock was
still held: a frozen holder that wakes after the server ended its transaction finds its connection
gone and its writes never land (see ``storage._claim``). A transaction-scoped lock also behaves
under PgBouncer's transaction pooling, where a session lock would outlive its transaction.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

from storage._errors import StorageError
from storage._optuna_internals import bound_to
from storage._urls import is_postgres, sqlite_path

if TYPE_CHECKING:
    from optuna.storages import RDBStorage

DEFAULT_HOLD_S = 60.0
MIN_HOLD_S = 5.0
"""A legitimate holder runs a few statements; below this a loaded machine could lose the lock."""
SQLITE_WAIT_S = 120.0


# Taking the lock sets the transaction's two limits in the same round trip, once the lock is held
# (the subquery, volatile, runs first): the server ends the transaction after ``ms`` of silence from
# its holder, and any statement of the holder that waits ``ms`` for a row or table lock (a session
# holding the study's row: psql, a migration, a process outside the study lock) fails with SQLSTATE
# 55P03 and ends the transaction, so the study lock is never held longer than that for either reason.
# The wait for the advisory lock itself has no limit: others' short claims pass it in turn.
_LIMITS = "set_config('idle_in_transaction_session_timeout', :ms, true), set_config('lock_timeout', :ms, true)"
_TAKE_WAITING = sqlalchemy.text(f"SELECT {_LIMITS} FROM (SELECT pg_advisory_xact_lock(:k)) AS held")
_TAKE_NOW = sqlalchemy.text(
    f"SELECT {_LIMITS} FROM (SELECT pg_try_advisory_xact_lock(:k) AS taken) AS held WHERE taken"
)


class LockBusy(StorageError):
    """``study_lock(wait=False)`` found the lock held by another process."""


class LockTimeout(StorageError):
    """SQLite: another process held the study lock for longer than the wait (a stopped or hung
    process holds it until it ends). A temporary failure, not bad input: the same command may work
    once that process has gone."""


@contextlib.contextmanager
def study_lock(engine: Engine, url: str, study_name: str, *, hold_s: float = DEFAULT_HOLD_S,
               wait: bool = True, wait_s: float = SQLITE_WAIT_S,
               storage: RDBStorage | None = None) -> Iterator[Connection | None]:  # fmt: skip
    """Hold an exclusive, study-scoped lock for the body.

    PostgreSQL: yields the connection whose transaction holds the lock; what the body writes on it
    commits with the lock's release, and only if the lock was held throughout. The server ends the
    transaction, and so frees the lock, once it has waited ``hold_s`` seconds for the holder's next
    statement, and a statement of the holder that waits that long on a row lock fails (SQLSTATE
    55P03, lock_not_available), ending the transaction. SQLite: an OS file lock next to the database
    file, released by the kernel when the process dies (not while it is stopped); yields None, or
    raises :class:`LockTimeout` after ``wait_s`` seconds. ``wait=False`` raises :class:`LockBusy` at
    once instead of waiting. ``storage``: an Optuna storage on ``engine`` whose calls in this thread
    run on the lock's connection while it is held (``storage._optuna_internals._bound``).
    """
    key = _lock_key(study_name)
    if is_postgres(url):
        with engine.connect() as conn:
            params = {"k": key, "ms": str(int(1000 * max(hold_s, MIN_HOLD_S)))}
            if not conn.execute(_TAKE_WAITING if wait else _TAKE_NOW, params).first():
                conn.rollback()
                raise LockBusy(f"the lock of study {study_name!r} is held by another process")
            with bound_to(storage, conn):
                yield conn
            conn.commit()  # the body's writes on ``conn`` and the lock's release, at once
        return
    from filelock import FileLock, Timeout

    path = str(sqlite_path(url)) + f".{key}.lock"
    try:
        lock = FileLock(path, timeout=wait_s if wait else 0)
        lock.acquire()
    except Timeout:
        if wait:
            raise LockTimeout(
                f"another process has held the lock of study {study_name!r} ({path}) for over {wait_s:g} s "
                "(a stopped or hung search process?); try again once it has ended"
            ) from None
        raise LockBusy(f"the lock of study {study_name!r} is held by another process") from None
    try:
        yield None
    finally:
        lock.release()


def check_lock(conn: Connection | None) -> None:
    """Raise the connection's error if the transaction behind ``conn`` (from :func:`study_lock`) is
    gone, and with it the lock: a check before a write made on another connection. SQLite: no-op."""
    if conn is not None:
        conn.execute(sqlalchemy.text("SELECT 1"))


def _lock_key(study_name: str) -> int:
    # Advisory lock keys are signed 64-bit; a stable CRC keeps them equal across processes.
    return 0x4850_5300_0000_0000 | zlib.crc32(study_name.encode())
