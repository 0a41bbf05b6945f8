"""Samplers and pruners by spec (``name`` or ``name:key=value,...``), so every worker rebuilds the same ones.

Each sampler and pruner is one class in its own module (``samplers/``, ``pruners/``), named in
its package's registry; it declares every option a spec may carry, with its type and default. A
spec is parsed here, once per process and text (:func:`parse_sampler`, :func:`parse_pruner`), and
checked in full before a study is created (an unknown option or a bad value is one line); the
options a spec names are the ones the built object gets.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError
from search.settings.pruners import PRUNERS
from search.settings.samplers import SAMPLERS
from search.settings.samplers._auto import Auto, auto_line

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler

    from search.settings._record import StudyRecord
    from search.settings._spec import AlgorithmSpec, PrunerSpec, SamplerSpec


def _parse(text: str, kind: str, registry: dict[str, Any]) -> Any:
    name = text.partition(":")[0].strip().lower()
    if name not in registry:
        raise SearchError(f"unknown {kind} {name!r}; choose one of: {', '.join(registry)}")
    return registry[name].parse(text)


@lru_cache(maxsize=64)
def parse_sampler(text: str) -> SamplerSpec:
    """``--sampler``'s spec (e.g. ``tpe:startup=5``) as its sampler class's instance, every option checked."""
    return _parse(text, "sampler", SAMPLERS)  # type: ignore[no-any-return]


@lru_cache(maxsize=64)
def parse_pruner(text: str) -> PrunerSpec:
    """``--pruner``'s spec (e.g. ``median:startup=2,warmup=1``) as its pruner class's instance, every option checked."""
    return _parse(text, "pruner", PRUNERS)  # type: ignore[no-any-return]


def make_sampler(spec: str, seed: int | None) -> BaseSampler:
    return parse_sampler(spec).build(seed)


def resolve_sampler(spec: str, workers: int | None, objectives: int = 1, folds: int = 0) -> tuple[str, str]:
    """``spec`` with ``auto`` resolved (``samplers/_auto.py``) for a new study searched by ``workers``
    workers (None: not known), and the line ``search start`` prints ("" for another spec)."""
    parsed = parse_sampler(spec)
    if not isinstance(parsed, Auto):
        return spec, ""
    chosen, why = parsed.resolve(workers, objectives, folds)
    return chosen, auto_line(chosen, why)


def with_resolved_sampler(record: StudyRecord, workers: int | None = None,
                          stored: StudyRecord | None = None) -> tuple[StudyRecord, str]:  # fmt: skip
    """``record`` with ``--sampler auto`` resolved, and the line saying what it chose ("" if nothing):
    for a new study, by its ``workers`` (None: not known); a resumed one (``stored``) keeps its
    sampler, which drew its trials so far."""
    chosen, line = record.settings.sampler, ""
    if stored is None:
        chosen, line = resolve_sampler(chosen, workers, len(record.goals()), record.folds)
    elif chosen == "auto":
        chosen = stored.settings.sampler
    return replace(record, settings=replace(record.settings, sampler=chosen)), line


def make_pruner(spec: str, max_epochs: int) -> BasePruner:
    return parse_pruner(spec).build(max_epochs)


def validate(sampler: str, pruner: str, max_epochs: int | None = None) -> None:
    """Check both specs in full before a study is created; with ``max_epochs``, also against the study."""
    parse_sampler(sampler)
    parsed = parse_pruner(pruner)
    if max_epochs is not None:
        parsed.check(max_epochs)


def describe_options(registry: dict[str, type[AlgorithmSpec]]) -> str:
    """One line per algorithm and its options, for ``--help`` and the docs."""
    lines = []
    for name, spec in registry.items():
        opts = ", ".join(f"{key}={opt.default}" for key, opt in spec.options.items())
        lines.append(f"{name}" + (f" [{opts}]" if opts else ""))
    return "; ".join(lines)


def describe(sampler: str, pruner: str) -> str:
    """What a strategy does, in words, for the start of a search (``--sampler``/``--pruner`` specs)."""
    return f"{parse_sampler(sampler).describe()}; {parse_pruner(pruner).describe()}"
