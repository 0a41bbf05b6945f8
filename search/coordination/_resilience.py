"""Riding out database outages: retry storage calls with capped backoff, up to a time limit.

A worker touches its databases at a few points (claiming, reporting, telling, heartbeats, MLflow).
Each goes through :func:`retrying`, which tells a lost connection (a server restart, a network
outage) from every other error, logs one line when an outage starts and one when it ends, and
gives up with :class:`DatabaseUnavailableError` once the outage has lasted ``--db-outage-limit``
seconds. The outage is tracked per process, so a heartbeat thread and the main thread that both
lose the connection log it once and share one deadline.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from search.exceptions import DatabaseUnavailableError, SearchError

log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_OUTAGE_LIMIT = "SEARCH_DB_OUTAGE_LIMIT"
DEFAULT_OUTAGE_LIMIT_S = 120.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 8.0
TRANSIENT_RERUNS = 5
# Errors of the OperationalError family that no amount of waiting fixes.
_PERMANENT = ("password authentication failed", "no password supplied", "does not exist")


def set_outage_limit(seconds: float) -> None:
    """Set ``--db-outage-limit`` for this process and the workers it starts (they inherit the environment)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise SearchError(f"--db-outage-limit must be a positive number of seconds, got {seconds:g}")
    os.environ[ENV_OUTAGE_LIMIT] = f"{seconds:g}"


def outage_limit() -> float:
    raw = os.environ.get(ENV_OUTAGE_LIMIT)
    if not raw:
        return DEFAULT_OUTAGE_LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        raise SearchError(f"{ENV_OUTAGE_LIMIT}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise SearchError(f"{ENV_OUTAGE_LIMIT} must be a positive number of seconds, got {raw}")
    return value


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) means the database connection was lost or refused.

    Optuna wraps SQLAlchemy errors in ``StorageInternalError`` and MLflow in ``MlflowException``;
    both keep the original as ``__cause__``, so the whole chain is looked at.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, DatabaseUnavailableError):
            return False  # an inner retry already gave up; do not start the clock again
        if _is_lost_connection(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


# SQLSTATEs that mean the connection itself is gone: class 08 (connection exception), the server
# shutting down or starting, and the server ending an idle transaction (a study lock's holder that
# froze). Any other SQLSTATE is an answer from a live server: a statement timeout, a deadlock, a
# constraint; waiting out an "outage" would hide it.
_GONE_CLASS = "08"
_GONE = frozenset({"57P01", "57P02", "57P03", "25P03"})
# A live server's answers that mean "run the same thing again": a deadlock victim, a serialization
# failure. Retried a few times at once, not counted as an outage.
TRANSIENT = frozenset({"40P01", "40001"})
# lock_timeout, which only the study lock's transaction sets (storage.study_lock): a statement under
# the lock waited a grace period for a row another session holds. The transaction, and with it the
# study lock, is gone; the call is retried with backoff, like an outage, on a clock of its own.
LOCK_TIMEOUT = "55P03"


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind ``exc`` (psycopg2's ``pgcode``, psycopg 3's ``sqlstate``), if any."""
    for inner in (exc, getattr(exc, "orig", None)):
        code = getattr(inner, "pgcode", None) or getattr(inner, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
    return None


def _is_lost_connection(exc: BaseException) -> bool:
    import sqlite3

    from sqlalchemy import exc as sa_exc

    if any(text in str(exc) for text in _PERMANENT):
        return False
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    code = sqlstate(exc)
    if code is not None:
        return code.startswith(_GONE_CLASS) or code in _GONE
    if isinstance(exc, sqlite3.Error) or isinstance(getattr(exc, "orig", None), sqlite3.Error):
        return False  # "database is locked" (past the busy timeout), a full disk: the file is there
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    return any(_is_driver_error(exc, driver) for driver in ("psycopg2", "psycopg"))


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _is_transient(exc: BaseException) -> bool:
    return any(sqlstate(inner) in TRANSIENT for inner in _chain(exc))


def _sqlite_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" past its busy timeout, however wrapped (MLflow's own exception)."""
    return any("database is locked" in str(inner) for inner in _chain(exc))


def is_lock_timeout(exc: BaseException) -> bool:
    """True when ``exc`` is a statement under the study lock that waited too long for a row lock."""
    return any(sqlstate(inner) == LOCK_TIMEOUT for inner in _chain(exc))


def _is_driver_error(exc: BaseException, driver: str) -> bool:
    """A raw connection error of psycopg2 or (when installed) psycopg 3, without importing either."""
    module = sys.modules.get(driver)
    return module is not None and isinstance(exc, module.OperationalError | module.InterfaceError)


class _Outage:
    """This process's view of the database: reachable, or unreachable since when."""

    def __init__(self, lost: str = "database connection lost", back: str = "database connection back",
                 gone: str = "database unreachable") -> None:  # fmt: skip
        self.lost, self.back, self.gone = lost, back, gone
        self._lock = threading.Lock()
        self.since: float | None = None
        self.ended: float | None = None

    def failed(self, what: str, exc: BaseException, hint: str = "") -> float:
        """Record a lost connection; return how long the outage has lasted so far."""
        with self._lock:
            now = time.monotonic()
            if self.since is None:
                self.since = now
                log.warning("%s while %s (%s); retrying for up to %g s%s",
                            self.lost, what, _brief(exc), outage_limit(), hint)  # fmt: skip
            return now - self.since

    def succeeded(self) -> None:
        if self.since is None:  # the common case, without taking the lock
            return
        with self._lock:
            if self.since is not None:
                now = time.monotonic()
                log.info("%s after %.1f s", self.back, now - self.since)
                self.since, self.ended = None, now

    def within(self, seconds: float) -> bool:
        """True during an outage (as this process last saw it) and for ``seconds`` after it ended."""
        since, ended = self.since, self.ended
        return since is not None or (ended is not None and time.monotonic() - ended < seconds)


OUTAGE = _Outage()
"""The Optuna database, as this process sees it (what the reaper's grace after an outage looks at)."""
TRACKING_OUTAGE = _Outage()
"""The MLflow tracking store: an outage of its own, so successful Optuna calls (the heartbeat, the
main thread's reports) neither reset its clock nor hide it, and it never delays reaping."""
ROW_LOCKS = _Outage("the study's rows locked by another session", "the study's rows free again",
                    "the study's rows locked by another session")  # fmt: skip
"""Claims that gave up waiting for a row another session holds (:data:`LOCK_TIMEOUT`). Its own
clock: the heartbeat's successes say nothing about those rows, and a held row is no outage (the
reaper's grace after one would wait for nothing)."""


_SQLITE_HELD = (
    "; the embedded MLflow store (SQLite) stays locked while a process stopped in the middle of a write "
    "(SIGSTOP, Ctrl-Z) holds it: resume or end that process, or track to a server (--tracking-uri)"
)


def _brief(exc: BaseException) -> str:
    from storage import mask

    inner: BaseException = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = str(getattr(inner, "orig", None) or inner).strip()
    return mask(text.splitlines()[0]) if text else type(inner).__name__


def retrying(call: Callable[[], T], what: str, outage: _Outage | None = None) -> T:
    """``call()``, retried with capped exponential backoff while the database is unreachable.

    ``what`` completes "database connection lost while ..." (e.g. "claiming a trial"). Only a
    lost or refused connection starts the outage clock. A statement under the study lock that timed
    out waiting for a row lock is retried the same way, on the clock of :data:`ROW_LOCKS`. A deadlock
    victim or a serialization failure is run again at once, a few times, without counting as an
    outage; any other error (a statement timeout, SQLite's "database is locked" past its busy
    timeout) propagates at once, but for MLflow's (``TRACKING_OUTAGE``): its embedded SQLite store is
    locked for as long as a frozen worker holds a write, which is waited out as an outage.
    ``call`` must be safe to repeat: a write whose reply was lost may have committed.

    Raises:
        DatabaseUnavailableError: the outage (or the rows' lock) lasted longer than ``--db-outage-limit``.
    """
    outage = outage or OUTAGE  # the Optuna database unless told otherwise
    delay = FIRST_DELAY_S
    reruns = TRANSIENT_RERUNS
    held = False  # this call met rows another session holds
    while True:
        try:
            result = call()
        except Exception as exc:
            if reruns and _is_transient(exc):
                reruns -= 1
                log.debug("%s: %s; running it again", what, _brief(exc))
                time.sleep(random.uniform(0.05, 0.5))
                continue
            # MLflow's embedded SQLite store stays locked while a frozen (SIGSTOPped) process holds a
            # write: a wait on the tracking clock, not a failed trial.
            locked = outage is TRACKING_OUTAGE and _sqlite_busy(exc)
            lost = is_connection_error(exc) or locked
            clock = ROW_LOCKS if is_lock_timeout(exc) else outage if lost else None
            if clock is None:
                raise
            held = held or clock is ROW_LOCKS
            hint = _SQLITE_HELD if locked else ""
            down, limit = clock.failed(what, exc, hint), outage_limit()
            if down >= limit:
                limits = f"(limit --db-outage-limit {limit:g})"
                raise DatabaseUnavailableError(
                    f"{clock.gone} for {down:.0f} s while {what} {limits}: {_brief(exc)}{hint}"
                ) from exc
            time.sleep(min(delay * random.uniform(0.8, 1.2), limit - down + 0.1))
            delay = min(2 * delay, MAX_DELAY_S)
            continue
        outage.succeeded()
        if held:  # only a call that met the held rows can say they are free
            ROW_LOCKS.succeeded()
        return result


def attempt(call: Callable[[], Any], what: str) -> bool:
    """Call once for a periodic job (a heartbeat): a lost connection is noted and reported as False."""
    try:
        call()
    except Exception as exc:
        if not is_connection_error(exc):
            raise
        OUTAGE.failed(what, exc)
        return False
    OUTAGE.succeeded()
    return True


class _Retrying:
    def __init__(self, target: Any, what: str, outage: _Outage | None) -> None:
        self._target = target
        self._what = what
        self._outage = outage

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._target, name)
        if not callable(member):
            return member

        @functools.wraps(member)
        def call(*args: Any, **kwargs: Any) -> Any:
            return retrying(lambda: member(*args, **kwargs), f"{self._what} ({name})", self._outage)

        return call


def resilient(target: T, what: str, outage: _Outage | None = None) -> T:
    """``target`` with every method call going through :func:`retrying` (for an MLflow client)."""
    return cast(T, _Retrying(target, what, outage))
