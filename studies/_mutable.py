"""Which search params may change in the middle of a trial's training (population-based training),
and the trainer fields each one sets.

A study declares them in an optional ``mutable_params`` mapping, param name -> trainer field
(``lr``, ``weight_decay`` or ``dropout``, the names ``trainer.Infra.mutable`` takes); a study without
one has none. The search layer asks :func:`mutation_fields` before it continues a trial's checkpoint
with other params, and passes the answer as ``Infra(mutable=...)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from studies._errors import StudyError


def mutable_params(study: Any) -> Mapping[str, str]:
    """``study.mutable_params`` where the study declares it, else an empty mapping.

    Raises:
        StudyError: a declared param maps onto something the trainer cannot change on resume.
    """
    from trainer import MUTABLE_FIELDS  # torch: only when asked, never on `import studies`

    declared = dict(getattr(study, "mutable_params", None) or {})
    wrong = {param: target for param, target in declared.items() if target not in MUTABLE_FIELDS}
    if wrong:
        what = ", ".join(f"{param} -> {target!r}" for param, target in sorted(wrong.items()))
        raise StudyError(
            f"study {getattr(study, 'name', '?')!r}: mutable_params maps {what}; "
            f"the trainer can change only {', '.join(sorted(MUTABLE_FIELDS))} on resume"
        )
    return MappingProxyType(declared)


def mutation_fields(study: Any, old: Any, new: Any) -> frozenset[str]:
    """The trainer fields that change when a trial trained with params ``old`` goes on with ``new``.

    ``old`` and ``new`` are params dataclasses (from ``study.suggest``) or Optuna params dicts. Pass
    the answer as ``trainer.Infra(mutable=...)`` to the fit that resumes with ``new``; empty when
    nothing changed.

    Raises:
        StudyError: a param the study does not declare mutable differs (the message names it),
            or the declaration is wrong (see :func:`mutable_params`).

    Example:
        >>> from studies import get_study, mutation_fields
        >>> study = get_study("resmlp")
        >>> old = {"lr": 1e-3, "weight_decay": 1e-4, "width": 128}
        >>> sorted(mutation_fields(study, old, {**old, "lr": 2e-3}))
        ['lr']
    """
    declared = mutable_params(study)
    before, after = _as_dict(old), _as_dict(new)
    missing = object()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k, missing) != after.get(k, missing))
    fixed = [k for k in changed if k not in declared]
    if fixed:
        what = ", ".join(f"{k}={before.get(k)!r} (now {after.get(k)!r})" for k in fixed)
        allowed = ", ".join(sorted(declared)) or "none"
        raise StudyError(
            f"study {getattr(study, 'name', '?')!r}: {what} cannot change in the middle of training; "
            f"mutable params: {allowed}"
        )
    return frozenset(declared[k] for k in changed)


def _as_dict(params: Any) -> Mapping[str, Any]:
    if isinstance(params, Mapping):
        return params
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    raise TypeError(f"params must be a dataclass or a mapping, got {type(params).__name__}")
