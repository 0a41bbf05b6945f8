"""Finding the study a command names, where the flags say it lives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import storage
from search.api._locations import resolve_locations
from search.coordination import Coordinator
from search.exceptions import SearchError
from search.execution import schema_checked
from search.settings import check_study_name, load_study, study_ref

if TYPE_CHECKING:
    from search.settings import Locations


LOCATION_FLAGS = ("storage", "tracking_uri", "artifact_location", "project_dir", "checkpoint_dir", "tensorboard")
"""The flags :func:`locations` resolves (with ``config_file``, read by click already)."""


def locations(kwargs: dict[str, Any], create: bool) -> Locations:
    """Pop the location flags from a command's ``kwargs`` and resolve them (search.toml was read by click)."""
    kwargs.pop("config_file", None)
    return resolve_locations(
        storage=kwargs.pop("storage"), tracking_uri=kwargs.pop("tracking_uri"),
        artifact_location=kwargs.pop("artifact_location"), project_dir=kwargs.pop("project_dir"),
        checkpoint_dir=kwargs.pop("checkpoint_dir"), tensorboard_dir=kwargs.pop("tensorboard", None), create=create,
    )  # fmt: skip


def study_name(kwargs: dict[str, Any]) -> str:
    """``--name``, else the study's own name (``--study`` may be a built-in or a file)."""
    name = kwargs.pop("name", None)
    ref = kwargs.pop("study", None)
    if name:
        return check_study_name(name)
    if not ref:
        raise SearchError("give --name (or --study) to say which study")
    if not ref.endswith(".py"):
        return check_study_name(ref, "--study")
    return check_study_name(load_study(study_ref(ref)).name, f"the name of study {ref}")


def check_reachable(loc: Locations) -> None:
    if storage.is_postgres(loc.storage_url):
        storage.check_connection(loc.storage_url)


def open_existing_with_locations(kwargs: dict[str, Any]) -> tuple[Coordinator, Locations]:
    name = study_name(kwargs)
    loc = locations(kwargs, create=False)
    path = storage.sqlite_path(loc.storage_url) if storage.is_sqlite(loc.storage_url) else None
    if path is not None and not path.exists():  # opening it would make an empty one
        if loc.embedded:
            raise SearchError(f"no study {name!r} here: {loc.project_dir} has no embedded store (give --storage?)")
        raise SearchError(f"no study {name!r}: {path} does not exist (check --storage)")
    check_reachable(loc)
    # raises StudyNotFoundError with a clear line
    coordinator = Coordinator.existing(loc.storage_url, name, schema_checked(loc.storage_url))
    return coordinator, loc


def open_existing(kwargs: dict[str, Any]) -> Coordinator:
    return open_existing_with_locations(kwargs)[0]
