"""The ``search`` command line: click commands, settings resolution, and the start and worker flows.

Imports here stay light so that ``search --help`` answers at once: the flows that create a study
(:class:`StartOptions`, :func:`prepare`, :func:`create_or_resume`) load on first use.
"""

from importlib import import_module
from typing import Any

from search.cli._group import cli
from search.cli._main import EXIT_INTERRUPTED, EXIT_USAGE, main, run

_LAZY = {
    "StartOptions": "search.cli._start_options",
    "PreparedStudy": "search.cli._start",
    "prepare": "search.cli._start",
    "create_or_resume": "search.cli._start",
    "run_start": "search.cli._start",
    "resolve_locations": "search.cli._settings",
}

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "cli", "main", "run", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
