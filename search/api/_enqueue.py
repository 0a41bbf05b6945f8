"""Configurations a user knows to try first (``search enqueue``): checked against the study's space,
then queued as trials that workers take before asking the sampler for new ones."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError
from search.settings import check_configuration

if TYPE_CHECKING:
    from search.coordination import Coordinator


def read_configurations(path: Path) -> list[dict[str, Any]]:
    """A JSON list of objects, or a CSV file with a header row of parameter names (empty cells: the
    sampler chooses); values are read as JSON where they can be (numbers, true/false)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SearchError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix.lower() == ".csv":
        rows = [{k: _value(v) for k, v in row.items() if k and v not in (None, "")}
                for row in csv.DictReader(io.StringIO(text))]  # fmt: skip
    else:
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SearchError(
                f"{path}: not JSON ({exc.msg} at line {exc.lineno}); give a list of objects or a .csv"
            ) from None
        if isinstance(rows, dict):
            rows = [rows]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SearchError(f"{path}: expected a list of objects, one configuration each")
    return rows


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def enqueue(coordinator: Coordinator, configs: list[dict[str, Any]]) -> list[int]:
    """Queue ``configs`` as trials of the budget (refused if they do not fit in what is left of it),
    under the study lock; the numbers of the queued trials."""
    if not configs:
        raise SearchError("no configuration to queue: give --params or --file")
    space = coordinator.read_record().space
    checked = [check_configuration(space, c, f"configuration {i + 1}") for i, c in enumerate(configs)]
    study = coordinator.load()
    with coordinator.lock():
        left = coordinator.budget() - coordinator.counts().logical
        if len(checked) > left:
            raise SearchError(f"{len(checked)} configuration{'s' * (len(checked) != 1)} but the budget has {left} "
                              "trial(s) left; raise it with search start --trials first")  # fmt: skip
        before = {t.number for t in study.get_trials(deepcopy=False)}
        for config in checked:
            study.enqueue_trial(config, skip_if_exists=False)
        return sorted(t.number for t in study.get_trials(deepcopy=False) if t.number not in before)
