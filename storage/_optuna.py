"""Opening the Optuna storage, with clear errors when the database cannot be used."""

from __future__ import annotations

import datetime
import json
import logging
import math
import re
import threading
import weakref
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from storage._engine import (
    CONNECT_TIMEOUT_S,
    close_at_exit,
    create_engine,
    engine_kwargs,
    ping_when_idle,
    tune_sqlite_connections,
)
from storage._errors import StorageError
from storage._steps import UPSERTS, check_running, insert_into, on_conflict_update, store_steps
from storage._urls import describe, host_port, is_postgres, is_sqlite, mask, normalize_db_url, sqlite_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from optuna.distributions import BaseDistribution
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial, TrialState

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
    read, 0.3-0.6 s of a worker's start) is made only if something asks for it.
    """
    from optuna.storages import RDBStorage

    url = normalize_db_url(url)
    if is_sqlite(url):
        tune_sqlite_connections()
    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs(url)}
    if schema_checked:
        kwargs.update(skip_compatibility_check=True, skip_table_creation=True)
    if heartbeat_interval:
        kwargs.update(
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            heartbeat_stale_trial_callback=stale_trial_callback,
        )
    try:
        with _versions_on_demand() if schema_checked else nullcontext():
            storage = RDBStorage(url, **kwargs)
    except (DBAPIError, SQLAlchemyError) as exc:
        raise StorageError(explain_db_error(url, exc)) from None
    except RuntimeError as exc:  # Optuna's schema check: tables of an Optuna this one does not read
        if "compatible with the table schema" not in str(exc):
            raise
        raise StorageError(f"cannot use database {describe(url)}: {exc}") from None
    if is_postgres(url):
        ping_when_idle(storage.engine)
        close_at_exit(storage.engine)
    return storage


_VERSIONS_LOCK = threading.Lock()


@contextmanager
def _versions_on_demand() -> Iterator[None]:
    """While it is held, an ``RDBStorage`` opened makes its schema-version manager on first use.

    Optuna makes it as a storage opens, whether or not its compatibility check is skipped. Another
    thread opening a storage meanwhile (not through here) gets one made on demand too, which is
    then made as soon as its own check (if not skipped) asks for it: the same work, later.
    """
    from optuna.storages._rdb import storage as rdb

    with _VERSIONS_LOCK:  # held while patched: a second opener must read the real one
        make = getattr(rdb, "_VersionManager", None)
        if make is None:  # another Optuna: its storage opens as it does (the checks stay skipped)
            yield
            return
        rdb._VersionManager = lambda *args: _VersionsOnDemand(make, args)  # type: ignore[assignment,misc]
        try:
            yield
        finally:
            rdb._VersionManager = make  # type: ignore[misc]


class _VersionsOnDemand:
    """Optuna's ``_VersionManager`` for a storage, made by the first attribute read (an upgrade or
    a version query: none of a worker's calls)."""

    def __init__(self, make: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._make, self._args, self._made = make, args, None

    def __getattr__(self, name: str) -> Any:
        if self._made is None:
            self._made = self._make(*self._args)
        return getattr(self._made, name)


_STUDY_DISTRIBUTIONS: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], BaseDistribution]] = (
    weakref.WeakKeyDictionary()
)
"""Per storage, a distribution already stored for each (study, param): what every later one of that
param must be compatible with (all stored ones are, with each other), so it is looked up once."""


def set_trial_params(storage: RDBStorage, trial_id: int, params: Sequence[tuple[str, float, BaseDistribution]]) -> None:
    """Store several params of a trial (name, internal value, distribution) in one transaction.

    Optuna commits each suggested param alone, and looks up the trial and an earlier distribution
    of the param each time; a trial's params are all chosen before it trains, so they are written
    together: the same checks (the trial is running, each distribution agrees with the study's
    earlier ones, looked up once per worker and param), all or none stored.
    """
    from optuna import distributions
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    if not params:
        return
    known = _STUDY_DISTRIBUTIONS.setdefault(storage, {})
    with _create_scoped_session(storage.scoped_session, True) as session:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        storage.check_trial_is_updatable(trial_id, trial.state)  # type: ignore[arg-type]  # ORM column
        study_id = int(trial.study_id)
        for name, value, distribution in params:
            previous = known.get((study_id, name))
            if previous is None:
                record = (
                    session.query(models.TrialParamModel.distribution_json)
                    .join(models.TrialModel)
                    .filter(models.TrialModel.study_id == study_id, models.TrialParamModel.param_name == name)
                    .first()
                )
                if record is not None:
                    previous = known[(study_id, name)] = distributions.json_to_distribution(record[0])
            if previous is not None:
                distributions.check_distribution_compatibility(previous, distribution)
            session.add(
                models.TrialParamModel(
                    trial_id=trial_id,
                    param_name=name,
                    param_value=value,
                    distribution_json=distributions.distribution_to_json(distribution),
                )
            )


def set_user_attrs(storage: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Set several user attributes of a trial in one transaction (Optuna commits each one alone).

    A trial's attributes are written at its start and end, on the orchestration path that every
    trial pays for: on PostgreSQL and SQLite, one look at the trial (which must not be finished)
    and one multi-row upsert, instead of two statements and a commit per attribute. Safe to repeat.
    """
    from optuna.storages._rdb.storage import _create_scoped_session

    if not attrs:
        return
    with _create_scoped_session(storage.scoped_session, True) as session:
        if storage.engine.name in UPSERTS:
            check_running(storage, session, trial_id)
        _write_attrs(storage, session, trial_id, attrs)


def _write_attrs(storage: RDBStorage, session: Any, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """The user attributes, upserted in one statement where the database can (the caller has checked
    that the trial runs); elsewhere one by one, as Optuna does, each checking."""
    from optuna.storages._rdb import models

    table = models.TrialUserAttributeModel
    if storage.engine.name not in UPSERTS:
        for key, value in attrs.items():
            storage._set_trial_attr_without_commit(session, table, trial_id, key, value)
    elif attrs:
        rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()]
        insert = insert_into(storage.engine.name, table).values(rows)
        session.execute(on_conflict_update(insert, [table.trial_id, table.key], ["value_json"]))


def finish_trial(
    storage: RDBStorage,
    trial_id: int,
    state: TrialState,
    value: float | None,
    attrs: Mapping[str, Any],
    before_write: Callable[[FrozenTrial, list[float] | None], None],
    steps: Mapping[int, float] | None = None,
) -> FrozenTrial | None:
    """Optuna's ``tell`` of a running trial, with its final user attributes and its last reported
    values not stored yet (``steps``: step -> value), in one transaction.

    Optuna's takes four (the trial read before and after, the write, and the attributes alone).
    The trial's row is locked and read; if it is already finished (by another process, or by this
    very call whose reply was lost) it is returned as found and nothing is written. Otherwise
    ``steps`` are stored, and then, as ``tell`` does: a pruned trial's value is its last reported
    one (when a number), the sampler's hook ``before_write(trial, values)`` runs (the state is
    written even if it raises), and the attributes, values, state and completion time are written
    together.

    Raises:
        ValueError: a COMPLETE trial told no value, or NaN.
    """
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    with _create_scoped_session(storage.scoped_session, True) as session:
        row = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
        frozen = storage._build_frozen_trial_from_trial_model(row)
        if frozen.state.is_finished():
            return frozen
        if steps:
            store_steps(storage, session, trial_id, steps)
            frozen.intermediate_values = {**frozen.intermediate_values, **steps}
        values = None if value is None else [float(value)]
        if state == TrialState.COMPLETE and (values is None or math.isnan(values[0])):
            raise ValueError(f"trial {frozen.number} cannot complete with the value {value!r}")
        if state == TrialState.PRUNED and frozen.last_step is not None:
            last = frozen.intermediate_values[frozen.last_step]
            values = None if math.isnan(last) else [last]
        failure: Exception | None = None
        try:
            before_write(frozen, values)
        except Exception as exc:  # noqa: BLE001 - raised once the state is written, as tell does
            failure = exc
        _write_attrs(storage, session, trial_id, attrs)
        for objective, item in enumerate(values or []):
            storage._set_trial_value_without_commit(session, row, objective, item)
        row.state = state
        row.datetime_complete = datetime.datetime.now()
    if failure is not None:
        raise failure
    return None
