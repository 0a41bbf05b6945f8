"""Whether a study found in the storage is the search a command asks for (``search start`` resuming it)."""

from __future__ import annotations

from search.coordination._grid import check_same_grid
from search.exceptions import StudyMismatchError
from search.settings import StudyRecord, describe_objectives, space_differences


def check_same_search(study_name: str, old: StudyRecord, new: StudyRecord) -> None:
    """A resumed study runs the search it stored: its objectives, space, options, seed, grid and study."""
    hint = "; choose another --name for a new study"
    if len({(r.metric, r.direction, tuple(r.constraints), tuple(r.goals())) for r in (old, new)}) > 1:
        raise StudyMismatchError(
            f"study {study_name!r} exists with {describe_objectives(old.goals(), old.limits())}, "
            f"not {describe_objectives(new.goals(), new.limits())}{hint}"
        )
    diff = space_differences(old.space, new.space)
    if diff:
        raise StudyMismatchError(
            f"study {study_name!r} exists with another search space (differs in {', '.join(diff)}){hint}"
        )
    if old.options != new.options or old.settings.seed != new.settings.seed:
        raise StudyMismatchError(
            f"study {study_name!r} exists with seed {old.settings.seed} and options {old.options}, "
            f"not seed {new.settings.seed} and options {new.options}{hint}"
        )
    check_same_grid(study_name, old.grid, new.grid, hint)
    if old.study_ref != new.study_ref:
        raise StudyMismatchError(f"study {study_name!r} exists for {old.study_ref!r}, not {new.study_ref!r}{hint}")
