"""``--warm-start-from STUDY``: an earlier study's best configurations, run first in a new study.

The source's complete trials that meet its constraints, best first by its first objective (its
champion rule's order for one objective), are mapped onto the new study's space and queued as
``--enqueue`` configurations are, before any worker joins. Where the spaces disagree a parameter is
left to the sampler: one the new space does not have is dropped, one whose value the new space does
not admit (outside its range, not one of its choices) is dropped from that configuration, and one
only the new space has is sampled. Configurations that become identical are queued once.

The earlier study's trials are not shown to the new study's sampler: they are another study's
values (another budget, fidelity or objective may have made them), and Optuna would count them as
the new study's trials. The known configurations' own results inform it, as every trial's does.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from search.coordination import Coordinator
from search.exceptions import SearchError
from search.execution import schema_checked
from search.settings import check_configuration, check_study_name
from search.settings._selection import candidates

if TYPE_CHECKING:
    from search.settings import Locations

DEFAULT_TOP = 5


def fit_to_space(space: dict[str, str], params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``params`` reduced to what ``space`` admits, and what was dropped (``width (not a parameter
    here)``, ``lr=0.3 (outside 1e-05..0.1)``); the parameters it lacks are left to the sampler."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in params.items():
        if name not in space:
            dropped.append(f"{name} (not a parameter here)")
            continue
        try:
            kept |= check_configuration(space, {name: value}, "")
        except SearchError as exc:
            dropped.append(f"{name}={value!r} ({str(exc).split(' is ', 1)[-1].lstrip(': ')})")
    return kept, dropped


def best_configurations(source: Coordinator, top: int) -> tuple[list[dict[str, Any]], int]:
    """The params of ``source``'s ``top`` best complete trials that meet its constraints, best first
    by its first objective, and how many such trials it has."""
    record = source.read_record()
    trials = {t.number: t for t in source.load().get_trials(deepcopy=False)}
    feasible = [c for c in candidates(trials.values()) if c.feasible]
    sign = -1.0 if record.maximize()[0] else 1.0
    ranked = sorted(feasible, key=lambda c: (sign * c.values[0], c.number))
    return [dict(trials[c.number].params) for c in ranked[:top]], len(feasible)


def warm_start(loc: Locations, prepared: Any, source_name: str | None, top: int) -> tuple[Any, str]:
    """``prepared`` (a ``search.api._start.PreparedStudy``) with ``source_name``'s best configurations
    queued after its ``--enqueue`` ones, and the line that says so; unchanged and ``""`` without
    ``--warm-start-from``.

    Raises:
        SearchError: the study to create exists already (a warm start is a new study's first
            trials; ``search enqueue`` queues more in an existing one), the source does not exist or
            has no complete trial meeting its constraints, or the configurations exceed the budget.
    """
    if source_name is None:
        return prepared, ""
    if top < 1:
        raise SearchError(f"--warm-start-top must be at least 1, got {top}")
    name = check_study_name(source_name, "--warm-start-from")
    if name == prepared.name:
        raise SearchError(f"--warm-start-from {name!r} names the study being created: give an earlier study")
    if prepared.points:
        raise SearchError("--warm-start-from does not go with --sampler grid: the grid's points are the queued trials")
    checked = schema_checked(loc.storage_url)
    if Coordinator(loc.storage_url, prepared.name, checked).exists():
        raise SearchError(f"study {prepared.name!r} exists: --warm-start-from queues a new study's first trials "
                          "(`search enqueue` queues more configurations in an existing one)")  # fmt: skip
    configs, complete = best_configurations(Coordinator.existing(loc.storage_url, name, checked), top)
    if not configs:
        raise SearchError(f"study {name!r} has no complete trial that meets its constraints to start from")
    fitted, dropped, seen = [], Counter[str](), set()
    for params in configs:
        kept, lost = fit_to_space(prepared.record.space, params)
        dropped.update(lost)
        key = json.dumps(kept, sort_keys=True, default=str)
        if kept and key not in seen:
            seen.add(key)
            fitted.append(kept)
    queued = (*prepared.enqueue, *fitted)
    if len(queued) > prepared.budget:
        raise SearchError(f"{len(queued)} configurations to run first (--enqueue and --warm-start-from) but "
                          f"--trials {prepared.budget}: lower --warm-start-top or raise --trials")  # fmt: skip
    line = f"warm start from {name!r}: its best {len(fitted)} of {complete} complete trials queued to run first"
    if dropped:
        line += "; left to the sampler where the spaces differ: " + ", ".join(
            f"{what} in {n} configuration{'s' * (n != 1)}" for what, n in sorted(dropped.items())
        )
    return replace(prepared, enqueue=queued), line
