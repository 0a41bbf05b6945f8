"""Built-in studies, registered by module path and imported only when asked for.

Each built-in is a module exposing ``make_study(**options) -> Study`` whose docstring's first line
describes it. Listing reads that docstring from the source without importing the module, so a
missing or broken study (or one with heavy imports) never affects the others.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from typing import Any

from studies._base import Study
from studies._errors import StudyLoadError
from studies._loader import call_factory, check_study, load_study_file

BUILTINS: dict[str, str] = {
    "resmlp": "studies.resmlp",
    "resnet": "studies.resnet",
    "tinylm": "studies.tinylm",
}
"""Study name -> module path."""


def list_studies() -> dict[str, str]:
    """Built-in study names and one-line descriptions; studies whose module is absent are left out."""
    studies: dict[str, str] = {}
    for name, module_path in BUILTINS.items():
        description = _describe(module_path)
        if description is not None:
            studies[name] = description
    return studies


def get_study(name_or_path: str, **options: Any) -> Study:
    """Return a built-in study by name, or the study defined in a ``.py`` file.

    Args:
        name_or_path: A name from :func:`list_studies` or a path ending in ``.py``.
        **options: Passed to the study's ``make_study`` (e.g. ``data="synthetic"``).

    Raises:
        StudyLoadError: Unknown name (the message lists the choices), bad options, or a broken study.
    """
    if name_or_path.endswith(".py"):
        return load_study_file(name_or_path, **options)
    available = list_studies()
    if name_or_path not in available:
        choices = ", ".join(sorted(available))
        raise StudyLoadError(f"unknown study {name_or_path!r}; choose from {choices}, or a path to a .py file")
    module_path = BUILTINS[name_or_path]
    try:
        module = importlib.import_module(module_path)
    except Exception as error:
        raise StudyLoadError(f"study {name_or_path!r} cannot be imported: {type(error).__name__}: {error}") from error
    factory = getattr(module, "make_study", None)
    if not callable(factory):
        raise StudyLoadError(f"study {name_or_path!r}: {module_path} has no make_study() function")
    study = call_factory(factory, options, source=f"study {name_or_path!r}")
    return check_study(study, source=f"study {name_or_path!r}")


def _describe(module_path: str) -> str | None:
    """First docstring line of ``module_path``; ``None`` when the module does not exist."""
    try:
        spec = importlib.util.find_spec(module_path)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as source:
            docstring = ast.get_docstring(ast.parse(source.read()))
    except (OSError, SyntaxError, ValueError) as error:
        return f"(unavailable: {type(error).__name__}: {error})"
    return docstring.strip().splitlines()[0] if docstring else "(no description)"
