"""The Python API under the ``search`` command line: each command is a call here.

The public calls (:func:`start`, :func:`status`, :func:`trials`, :func:`best`, :func:`retrain`,
:func:`export`, :func:`quantize`, :func:`report`) are also ``search.start`` and so on. The building blocks of
``search start`` (:class:`StartOptions`, :func:`prepare`, :func:`create_or_resume`,
:func:`resolve_locations`) are here for code that drives a study step by step. Imports stay light
until a call needs them.
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "SearchOutcome": "search.api._library",
    "start": "search.api._library",
    "status": "search.api._library",
    "enqueue": "search.api._library",
    "trials": "search.api._library",
    "best": "search.api._library",
    "retrain": "search.api._library",
    "export": "search.api._library",
    "quantize": "search.api._library",
    "report": "search.api._library",
    "StartOptions": "search.api._options",
    "PreparedStudy": "search.api._start",
    "prepare": "search.api._start",
    "create_or_resume": "search.api._start",
    "run_start": "search.api._start",
    "resolve_locations": "search.api._locations",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
