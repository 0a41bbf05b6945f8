"""Turning a ``--study`` value (built-in name or file) into a study object, with search's errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from studies import Study


def study_ref(value: str) -> str:
    """A built-in name stays a name; a file becomes an absolute path every process agrees on."""
    return str(Path(value).expanduser().resolve()) if value.endswith(".py") else value


def load_study(ref: str, options: dict[str, Any] | None = None, narrow: dict[str, list[float]] | None = None) -> Study:
    """The study ``ref`` names, made with ``options``; its ``suggest`` narrowed to ``narrow``'s ranges."""
    import studies

    try:
        study = studies.get_study(ref, **(options or {}))
    except studies.StudyError as exc:
        raise SearchError(str(exc)) from None
    if not narrow:
        return study
    from search.settings._space import NarrowedStudy, check_narrow

    try:
        check_narrow(study, narrow)
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    return NarrowedStudy(study, narrow)  # type: ignore[return-value]


def parse_options(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``key=value`` pairs of ``--study-option``; values are parsed as JSON when they can be."""
    import json

    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SearchError(f"bad --study-option {item!r}; expected key=value")
        try:
            options[key.strip().replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip().replace("-", "_")] = raw
    return options


def params_dict(params: Any) -> dict[str, Any]:
    """A study's frozen params (a dataclass, or any object with attributes) as a plain dict."""
    from dataclasses import asdict, is_dataclass

    return asdict(params) if is_dataclass(params) and not isinstance(params, type) else dict(vars(params))
