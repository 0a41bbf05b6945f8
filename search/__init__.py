"""hpsearch: hyperparameter search for PyTorch on Optuna, Accelerate and MLflow.

In Python::

    import search

    outcome = search.start("resmlp", trials=20, workers=2)   # what `search start` does
    df = search.trials("resmlp")                             # every trial, as a DataFrame
    search.best("resmlp")["champion"]                        # the registered champion

The calls are :mod:`search.api`'s; the ``search`` command line (:mod:`search.cli`) is a layer of
options and output over them. Heavy libraries are imported lazily so that ``import search`` and
``search --help`` answer at once.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_API = ("start", "enqueue", "status", "trials", "best", "retrain", "export", "quantize", "report", "SearchOutcome")
_ERRORS = ("SearchError", "TemporaryFailure")

__all__ = [*_API, *_ERRORS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module("search.api"), name)
    if name in _ERRORS:
        return getattr(import_module("search.exceptions"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
