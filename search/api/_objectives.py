"""``search start``'s objectives and constraints: checked with the flags, stored with the study,
held to on resume (``search/settings/_objectives.py`` says what they mean)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from search.exceptions import SearchError, StudyMismatchError
from search.settings import (
    SearchSettings,
    parse_constraints,
    parse_objectives,
    parse_sampler,
    prunes,
)

if TYPE_CHECKING:
    from search.api._options import StartOptions
    from search.settings import StudyRecord

_DEFAULT_PRUNER = SearchSettings().pruner


def with_objectives(record: StudyRecord, opts: StartOptions) -> StudyRecord:
    """``record`` with the objectives and constraints asked for, and the pruner they allow.

    The pruner prunes on the per-epoch curve of the study's metric: with any other objectives it is
    ``none`` (a ``--pruner`` given with them is refused), and ``--patience`` on that curve is what
    ends trials early. The sampler must be able to search several objectives when there are several.
    """
    objectives = parse_objectives(opts.objectives) or record.goals()
    stored = [] if prunes(objectives, record.metric, record.direction) else [[o.metric, o.direction]
                                                                           for o in objectives]  # fmt: skip
    constraints = [c.label for c in parse_constraints(opts.constraints)]
    settings = record.settings
    if stored:
        # Given (a Python caller gives every setting: there, any but the default counts as given).
        given = settings.pruner != _DEFAULT_PRUNER if opts.explicit is None else "pruner" in opts.explicit
        if given and settings.pruner.partition(":")[0].strip().lower() != "none":
            raise SearchError(
                f"--pruner {settings.pruner} prunes on the per-epoch {record.metric} curve, and this search's "
                f"objectives are {', '.join(o.text() for o in objectives)}: leave --pruner out (none is used; "
                "--patience still ends trials whose curve stops improving)"
            )
        settings = replace(settings, pruner="none")
    spec = parse_sampler(settings.sampler)
    if len(objectives) > 1 and not spec.multi_objective:
        raise SearchError(f"--sampler {settings.sampler} searches one objective; with several (--objective) use "
                          "tpe, nsga2, gp, random, qmc or grid")  # fmt: skip
    return replace(record, settings=settings, objectives=stored, constraints=constraints)


FOLD_PRUNERS = ("wilcoxon", "none")
"""The pruners that compare whole folds (a k-fold trial reports one value per fold, not per epoch)."""


def with_folds(record: StudyRecord, opts: StartOptions, folds: int) -> StudyRecord:
    """``record`` with the pruner a study of ``folds`` folds gets: ``wilcoxon`` unless one was given
    (a k-fold trial reports each fold's value at step = fold index); a pruner of per-epoch curves is
    refused in one line, and so is ``wilcoxon`` without folds."""
    settings = record.settings
    name = settings.pruner.partition(":")[0].strip().lower()
    if folds < 2:
        if name == "wilcoxon":
            raise SearchError("--pruner wilcoxon compares a trial's folds with the best trial's: it needs a study "
                              "with folds (--study-option folds=K, K >= 2)")  # fmt: skip
        return record
    record = replace(record, folds=folds)
    given = settings.pruner != _DEFAULT_PRUNER if opts.explicit is None else "pruner" in opts.explicit
    # Kept when already one: "none" when other objectives than the study's own are searched, the
    # stored one of a resumed study (wilcoxon:p=0.3 stays so).
    if not given and name not in FOLD_PRUNERS:
        return replace(record, settings=replace(settings, pruner="wilcoxon"))
    if name not in FOLD_PRUNERS:
        raise SearchError(f"--pruner {settings.pruner} prunes on per-epoch curves, and with folds={folds} a "
                          f"trial reports one value per fold: use {' or '.join(FOLD_PRUNERS)} (wilcoxon, the "
                          "default)")  # fmt: skip
    return record


def reconcile_objectives(opts: StartOptions, stored: StudyRecord) -> StartOptions:
    """On resume: objectives and constraints left out keep the stored ones; others are refused."""
    hint = "; drop the flag to resume, or give --name for a new study"
    goals = [o.text() for o in stored.goals()]
    if opts.objectives:
        asked = [o.text() for o in parse_objectives(opts.objectives)]
        if asked != goals:
            raise StudyMismatchError(f"--objective {' '.join(asked)} differs from the study's stored objectives "
                                     f"{' '.join(goals)}{hint}")  # fmt: skip
    if opts.constraints:
        asked = [c.label for c in parse_constraints(opts.constraints)]
        if asked != stored.constraints:
            raise StudyMismatchError(f"--constraint {' '.join(asked)} differs from the study's stored constraints "
                                     f"{' '.join(stored.constraints) or '(none)'}{hint}")  # fmt: skip
    # A study searching its own metric stored none: it keeps following the study file's metric and
    # direction, so a file whose direction changed is refused as another search (coordination.check_same_search).
    kept = tuple(goals) if stored.objectives else tuple(opts.objectives)
    return replace(opts, objectives=kept, constraints=tuple(stored.constraints))
