"""A grid search's points, queued as its study's trials (``--sampler grid``, ``search/settings/_grid.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from search.exceptions import StudyMismatchError
from search.settings import grid_differences, point_key

if TYPE_CHECKING:
    import optuna


def queue_points(study: optuna.Study, points: Sequence[dict[str, Any]], room: int) -> int:
    """Queue, in their order, the ``points`` no trial of the study has yet, at most ``room`` of
    them; how many were queued. The caller holds the study lock and has set the budget that makes
    the room: the same command again queues nothing, a larger ``--trials`` the next points."""
    trials = study.get_trials(deepcopy=False)
    have = {point_key(t.params or t.system_attrs.get("fixed_params") or {}) for t in trials}
    todo = [p for p in points if point_key(p) not in have][: max(0, room)]
    for point in todo:
        study.enqueue_trial(point, skip_if_exists=False)
    return len(todo)


def check_same_grid(study_name: str, old: dict[str, list[Any]], new: dict[str, list[Any]], hint: str) -> None:
    """A resumed grid search runs the grid it stored."""
    if grid_differences(old, new):
        raise StudyMismatchError(f"study {study_name!r} exists with another grid ({grid_differences(old, new)}){hint}")
