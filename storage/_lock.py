"""A study-wide mutex: claiming a trial (count, then create) must not interleave across workers."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

from storage._urls import is_postgres, sqlite_path


@contextlib.contextmanager
def study_lock(engine: Engine, url: str, study_name: str) -> Iterator[Connection | None]:
    """Hold an exclusive, study-scoped lock for the body.

    PostgreSQL: a session advisory lock on a dedicated connection (released when that connection
    ends, so a worker that dies while holding it cannot wedge the study). SQLite: an OS file lock
    next to the database file, released by the kernel when the process dies.
    """
    if is_postgres(url):
        key = _lock_key(study_name)
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield conn
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
        return
    from filelock import FileLock

    db = sqlite_path(url)
    with FileLock(str(db) + f".{_lock_key(study_name)}.lock", timeout=120):
        yield None


def _lock_key(study_name: str) -> int:
    # Advisory lock keys are signed 64-bit; a stable CRC keeps them equal across processes.
    return 0x4850_5300_0000_0000 | zlib.crc32(study_name.encode())
