"""Resuming: a flag that changes a stored setting applies or is refused, never silently ignored.

A given value that differs applies when the trials so far stay comparable (budget, retries,
heartbeats, stall timeout, sampler, pruner, patience: stored with the study, used by every worker
started from now on) and is refused when they would not (the seed also splits the data; study
options change the data or the model; the latency batch is what trials' ``latency_ms_batch`` was
measured at).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING

import storage
from search.api._objectives import reconcile_objectives
from search.coordination import STOPPED_ATTR, Coordinator, epochs_trained, objective_error
from search.exceptions import StudyMismatchError
from search.settings import (
    SearchSettings,
    StudyRecord,
    check_study_name,
    grid_differences,
    grid_size,
    is_grid,
    load_study,
    parse_epoch_budget,
    study_ref,
)

if TYPE_CHECKING:
    from search.api._options import StartOptions
    from search.settings import Locations
    from studies import Study


def start_name(opts: StartOptions, study: Study) -> str:
    """The Optuna study's name: ``--name``, else the study's own, checked before anything is created."""
    if opts.name:
        return check_study_name(opts.name)
    return check_study_name(study.name, f"the name of study {opts.study}")


REFUSED = frozenset({"seed", "latency_batch"})
"""Settings a resumed study cannot change: its trials so far would not be comparable with new ones."""
_HINT = "; drop the flag to resume, or give --name for a new study"


def resume_options(opts: StartOptions, loc: Locations) -> tuple[StartOptions, list[str]]:
    """``opts`` as a resumed study runs them, and one line per stored setting they change.

    A new study (none of that name in the storage) takes ``opts`` as they are, with no lines.
    """
    name = start_name(opts, load_study(study_ref(opts.study), opts.study_options))
    if not storage.has_optuna_tables(loc.storage_url):
        return opts, []
    coordinator = Coordinator(loc.storage_url, name)
    if not coordinator.exists():
        return opts, []
    if (error := objective_error(coordinator)) is not None:
        raise StudyMismatchError(f"study {name!r} stopped: {error}; start a new study (--name) with metrics its "
                                 "trials record")  # fmt: skip
    record = coordinator.read_record()
    asked = int((coordinator.study_user_attrs().get(STOPPED_ATTR) or {}).get("asked") or 0)
    counts, budget = coordinator.counts(), coordinator.budget()
    if opts.trials is None and opts.epoch_budget is not None:  # enough trials for the epochs left
        left = parse_epoch_budget(opts.epoch_budget, record.search_epochs) - epochs_trained(
            coordinator.storage.get_all_trials(coordinator.study_id(), deepcopy=False))  # fmt: skip
        if left > 0:  # (a grid's queued points are trials to come, not trials taken; it runs at most its points)
            wanted = max(asked, budget, counts.started + left)
            opts = replace(opts, trials=min(wanted, grid_size(record.grid)) if record.grid else wanted)
    elif opts.trials is None and counts.unstarted and asked > budget:  # an early stop left queued points: on to them
        opts = replace(opts, trials=asked)
    return reconcile(opts, record, budget)


def reconcile(opts: StartOptions, stored: StudyRecord, budget: int) -> tuple[StartOptions, list[str]]:
    """Merge what the user gave (``opts.explicit``) into the stored record; refuse what cannot change."""
    given = opts.explicit

    def asked(name: str) -> bool:
        return given is None or name in given

    if asked("narrow") and opts.narrow != stored.narrow:
        raise StudyMismatchError(
            f"--narrow {_options(opts.narrow)} differs from the study's stored ranges {_options(stored.narrow)}{_HINT}"
        )
    if asked("study_options") and opts.study_options != stored.options:
        raise StudyMismatchError(
            f"--study-option {_options(opts.study_options)} differs from the study's stored options "
            f"{_options(stored.options)}{_HINT}"
        )
    values, lines = {}, []
    for setting in (f.name for f in fields(SearchSettings)):
        old, new = getattr(stored.settings, setting), getattr(opts.settings, setting)
        # --sampler auto keeps a resumed study's sampler (its trials so far were drawn by it).
        if not asked(setting) or new == old or (setting == "sampler" and new == "auto"):
            values[setting] = old
            continue
        flag = "--" + setting.replace("_", "-")
        if setting == "sampler" and is_grid(new) != is_grid(old):
            raise StudyMismatchError(f"--sampler {new} differs from the study's stored --sampler {old}, and a grid "
                                     f"search's trials are its grid's points{_HINT}")  # fmt: skip
        if setting in REFUSED:
            raise StudyMismatchError(f"{flag} {new} differs from the study's stored {flag} {old}{_HINT}")
        values[setting] = new
        shown = ["off" if setting == "stall_timeout" and value == 0 else value for value in (old, new)]
        lines.append(f"{flag}: {shown[0]} -> {shown[1]} (stored with the study; workers started from now on use it)")
    trials = budget if opts.trials is None else opts.trials  # the grid's: --trials may be left out
    if trials != budget:
        lines.append(f"--trials: budget {budget} -> {trials}")
    # Parameters left out of --grid keep their stored values; one given with other values is refused.
    given_grid = {name: list(dict.fromkeys(values)) for name, values in opts.grid.items()} if asked("grid") else {}
    grid = {**stored.grid, **given_grid}
    if stored.grid and grid_differences(stored.grid, grid):
        raise StudyMismatchError(f"--grid differs from the study's stored grid ({grid_differences(stored.grid, grid)})"
                                 f"{_HINT}")  # fmt: skip
    opts = reconcile_objectives(opts, stored)
    return replace(opts, trials=trials, settings=SearchSettings(**values), study_options=stored.options,
                   narrow=stored.narrow, grid=grid), lines  # fmt: skip


def _options(options: Mapping[str, object]) -> str:
    def show(value: object) -> str:  # a narrowed range [low, high] reads as low:high
        return ":".join(f"{v:g}" for v in value) if isinstance(value, list) else str(value)

    return ",".join(f"{k}={show(v)}" for k, v in sorted(options.items())) or "(none)"
