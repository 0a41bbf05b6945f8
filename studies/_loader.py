"""Load a study from a user's ``.py`` file and check that an object really is a study.

A study file defines one of, in order of preference:

* a module-level ``study`` object;
* a ``make_study(**options)`` function returning the study;
* exactly one module-level object that satisfies the :class:`~studies.Study` protocol.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from studies._base import Fidelity, Study
from studies._errors import StudyLoadError

_ATTRIBUTES = ("name", "metric", "direction", "search_fidelity", "full_fidelity")
_METHODS = ("suggest", "load_data", "build_model", "train_config")
_OPTIONAL_METHODS = ("train_infra",)
_DIRECTIONS = ("minimize", "maximize")


def load_study_file(path: str | Path, **options: Any) -> Study:
    """Import ``path`` and return the study it defines.

    Args:
        path: A Python file defining ``study``, ``make_study(**options)`` or one study object.
        **options: Passed to ``make_study``; an error when the file has no ``make_study``.

    Raises:
        StudyLoadError: The file is missing or cannot be imported, or it defines no usable study.
    """
    path = Path(path)
    if not path.is_file():
        raise StudyLoadError(f"study file not found: {path}")
    if path.suffix != ".py":
        raise StudyLoadError(f"study file must be a .py file, got {path}")
    module = _import_file(path)
    return check_study(_find_study(module, path, options), source=str(path))


def check_study(obj: Any, source: str) -> Study:
    """Return ``obj`` if it satisfies the :class:`~studies.Study` protocol, else raise.

    Raises:
        StudyLoadError: Naming exactly which attributes are missing or invalid.
    """
    kind = type(obj).__name__
    missing = [name for name in (*_ATTRIBUTES, *_METHODS) if not hasattr(obj, name)]
    if missing:
        raise StudyLoadError(f"{source}: study object ({kind}) is missing {', '.join(missing)}")
    methods = (*_METHODS, *(name for name in _OPTIONAL_METHODS if hasattr(obj, name)))
    not_callable = [name for name in methods if not callable(getattr(obj, name))]
    if not_callable:
        raise StudyLoadError(f"{source}: study object ({kind}) has non-callable {', '.join(not_callable)}")
    if obj.direction not in _DIRECTIONS:
        raise StudyLoadError(f"{source}: direction must be 'minimize' or 'maximize', got {obj.direction!r}")
    for name in ("name", "metric"):
        if not isinstance(getattr(obj, name), str) or not getattr(obj, name):
            raise StudyLoadError(f"{source}: {name} must be a non-empty string, got {getattr(obj, name)!r}")
    for name in ("search_fidelity", "full_fidelity"):
        if not isinstance(getattr(obj, name), Fidelity):
            got = type(getattr(obj, name)).__name__
            raise StudyLoadError(f"{source}: {name} must be a studies.Fidelity, got {got}")
    return obj


def call_factory(factory: Callable[..., Any], options: Mapping[str, Any], source: str) -> Any:
    """Call ``factory(**options)``, turning unknown options and factory errors into one line."""
    signature = inspect.signature(factory)
    try:
        signature.bind(**options)
    except TypeError:
        accepted = ", ".join(signature.parameters) or "none"
        unknown = ", ".join(sorted(options))
        raise StudyLoadError(f"{source}: bad study options ({unknown}); accepted: {accepted}") from None
    for name, value in options.items():
        _check_number(signature.parameters.get(name), name, value, source)
    try:
        return factory(**options)
    except (ValueError, TypeError) as error:
        raise StudyLoadError(f"{source}: {error}") from error


def _check_number(param: inspect.Parameter | None, name: str, value: Any, source: str) -> None:
    """An option whose default is a whole number (or a number) must read as one: named in one line,
    before the factory's own ``int(value)`` says only ``invalid literal for int()``."""
    default = None if param is None else param.default
    if type(default) not in (int, float):  # bool is not a number here; no default: the factory's to check
        return
    whole = type(default) is int
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number) or (whole and not number.is_integer()):
        raise StudyLoadError(f"{source}: option {name} must be {'a whole number' if whole else 'a number'}, "
                             f"got {value!r}")  # fmt: skip


def _module_name(path: Path) -> str:
    # Deterministic per file, so loading a file twice replaces rather than duplicates it, and two
    # files with the same stem never collide.
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"hpsearch_study_{stem}_{digest}"


def _import_file(path: Path) -> ModuleType:
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StudyLoadError(f"cannot import study file {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing: dataclasses defined in the file look their module up here.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        del sys.modules[name]
        raise StudyLoadError(f"syntax error in {path}, line {error.lineno}: {error.msg}") from None
    except Exception as error:
        del sys.modules[name]
        raise StudyLoadError(f"importing {path} failed: {type(error).__name__}: {error}") from error
    return module


def _find_study(module: ModuleType, path: Path, options: Mapping[str, Any]) -> Any:
    if hasattr(module, "study"):
        if options:
            raise StudyLoadError(
                f"{path} defines `study`, which takes no options; define make_study(**options) instead"
            )
        return module.study
    factory = getattr(module, "make_study", None)
    if callable(factory):
        return call_factory(factory, options, source=f"make_study() in {path}")
    if options:
        raise StudyLoadError(f"{path} has no make_study(**options) to pass options to")
    candidates = {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, type | ModuleType) and isinstance(value, Study)
    }
    if len(candidates) == 1:
        return next(iter(candidates.values()))
    if candidates:
        raise StudyLoadError(
            f"{path} defines several study objects ({', '.join(candidates)}); name the one to use `study`"
        )
    raise StudyLoadError(f"no study found in {path}: define a module-level `study` or a make_study() function")
