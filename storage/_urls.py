"""Database URLs: normalising, masking and describing them.

This module (with the rest of :mod:`storage`) is the only place that builds database URLs.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from storage._errors import StorageError

_SECRET_IN_TEXT = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s]+)(?P<tail>@)")
_PASSWORD_KEYS = ("password", "passwd", "pwd", "sslpassword")
_SECRET_IN_QUERY = re.compile(
    r"(?P<head>[?&](?:password|passwd|pwd|sslpassword)=)(?P<secret>[^&\s'\"]+)", re.IGNORECASE
)


def normalize_db_url(url: str) -> str:
    """Map ``postgresql://`` and ``postgres://`` to the psycopg2 driver; keep ``postgresql+psycopg://``
    (psycopg 3, SQLAlchemy 2's default) when psycopg 3 is installed; refuse other drivers in one line.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StorageError(f"not a database URL: {mask(url)}") from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    elif parsed.drivername == "postgresql+psycopg":
        if importlib.util.find_spec("psycopg") is None:
            raise StorageError(
                "postgresql+psycopg:// needs psycopg 3 (pip install 'psycopg[binary]'); "
                "or use postgresql:// (psycopg2, installed)"
            )
    elif parsed.drivername.startswith("postgresql+") and parsed.drivername != "postgresql+psycopg2":
        raise StorageError(
            f"driver {parsed.drivername!r} is not supported; use postgresql:// (psycopg2) or postgresql+psycopg:// "
            "(psycopg 3)"
        )
    return parsed.render_as_string(hide_password=False)


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of an SQLite file (absolute, so every process agrees on it)."""
    return f"sqlite:///{path.resolve()}"


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql", "postgres"))


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise StorageError("an in-memory SQLite database cannot be shared by workers; give a file path")
    return Path(database)


def mask(text: str) -> str:
    """Replace every password embedded in a URL inside ``text`` (``user:pw@`` or ``?password=pw``) with ``***``."""
    text = _SECRET_IN_TEXT.sub(lambda m: f"{m['head']}***{m['tail']}", text)
    return _SECRET_IN_QUERY.sub(lambda m: f"{m['head']}***", text)


def without_password(url: str) -> tuple[str, bool]:
    """``url`` with its password (in the authority or the query) left out, and whether it had one.

    For commands printed for a user to paste: a ``***`` in their place would be sent as the password.
    """
    try:
        parsed: URL = make_url(url)
    except ArgumentError:
        return mask(url), mask(url) != url
    query = {k: v for k, v in parsed.query.items() if k.lower() not in _PASSWORD_KEYS}
    had = parsed.password is not None or len(query) != len(parsed.query)
    bare = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, query)
    return bare.render_as_string(hide_password=False), had


def describe(url: str) -> str:
    """Short, password-free name of a store: ``postgresql://user@host:5432/db`` or a file path."""
    try:
        parsed: URL = make_url(url)
    except ArgumentError:
        return mask(url)
    if parsed.drivername.startswith("sqlite"):
        return str(parsed.database)
    user = f"{parsed.username}@" if parsed.username else ""
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.drivername.split('+')[0]}://{user}{parsed.host or 'localhost'}{port}/{parsed.database or ''}"


def host_port(url: str) -> tuple[str, int]:
    parsed = make_url(url)
    return parsed.host or "localhost", parsed.port or 5432
