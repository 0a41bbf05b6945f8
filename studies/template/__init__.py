"""The starting point for a user's study file, which also documents the study file format.

``study_template.py.tmpl`` uses :class:`string.Template` placeholders: ``${name}`` (the study
name) and ``${class_name}`` (the study class, derived from the name). A literal dollar sign in the
template is written ``$$``.
"""

from __future__ import annotations

import re
import string
from importlib import resources

TEMPLATE_FILE = "study_template.py.tmpl"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def render_template(name: str) -> str:
    """Source of a complete, runnable study file for a study called ``name``.

    Args:
        name: Study name (letters, digits, ``_`` and ``-``, starting with a letter); it becomes the
            registered model name and the default Optuna study name.

    Raises:
        ValueError: ``name`` is not a valid study name.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"study name must start with a letter and use only letters, digits, '_' and '-', got {name!r}")
    source = resources.files(__package__).joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")
    return string.Template(source).substitute(name=name, class_name=class_name(name))


def class_name(name: str) -> str:
    """``my-study`` -> ``MyStudy``, ``digits_v2`` -> ``DigitsV2Study``."""
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[_-]+", name) if part)
    return camel if camel.endswith("Study") else f"{camel}Study"
