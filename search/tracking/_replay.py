"""The retrain of a trial that population-based training made: its lineage's params, replayed.

A trial under ``--pruner pbt`` was trained by a chain of attempts, each going on from a copy of a
better trial's checkpoint with perturbed params (``search.settings._freeze_thaw.lineage``). Its
retrain replays that schedule at full scale: the epochs where the params changed are scaled from the
search's epochs to the full training's, and each segment resumes the previous one's checkpoint with
the new values (``trainer.Infra.mutable``). Any other trial is one segment: a plain fit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies import mutable_params

if TYPE_CHECKING:
    from search.coordination import Coordinator


def replay_schedule(coordinator: Coordinator, best: Any, search_epochs: int,
                    full_epochs: int) -> list[tuple[int, dict[str, Any]]]:  # fmt: skip
    """The params ``best``'s weights were trained with, as ``(epoch they take over, params)``, the
    epochs scaled from the search's to the full training's: one entry but under population-based
    training, whose lineage the retrain replays (``search.settings._freeze_thaw.lineage``)."""
    from search.settings._freeze_thaw import lineage

    if "pbt_epoch" not in best.user_attrs:
        return [(0, dict(best.params))]
    trials = coordinator.storage.get_all_trials(coordinator.study_id(), deepcopy=False)
    return scale_schedule(lineage(trials, best), search_epochs, full_epochs)


def scale_schedule(schedule: list[tuple[int, dict[str, Any]]], search_epochs: int,
                   full_epochs: int) -> list[tuple[int, dict[str, Any]]]:  # fmt: skip
    """Each change's epoch scaled from the search's epochs to the full training's (two changes that
    land in one full epoch: the later one; none at or past the last epoch)."""
    scaled: list[tuple[int, dict[str, Any]]] = []
    for start, params in schedule:
        epoch = min(full_epochs - 1, round(start * full_epochs / search_epochs))
        if scaled and epoch <= scaled[-1][0]:
            scaled[-1] = (scaled[-1][0], params)
        else:
            scaled.append((epoch, params))
    return scaled


def schedule_json(schedule: list[tuple[int, dict[str, Any]]]) -> str:
    """``[[epoch, params], ...]``: the retrain run's ``hpsearch.pbt_schedule`` tag."""
    return json.dumps([[epoch, dict(params)] for epoch, params in schedule])


def fit_schedule(study: Any, data: Any, number: int, schedule: list[tuple[int, dict[str, Any]]], tmp: Path,
                 progress: Any, run: Any) -> tuple[Any, Any, Any, list[dict[str, float]]]:  # fmt: skip
    """Fit each segment of ``schedule`` in turn in ``tmp``; the last segment's model, params and fit
    result, and every epoch's metrics."""
    import optuna

    import trainer
    from studies import study_infra

    history: list[dict[str, float]] = []
    model = params = result = None
    for index, (_, segment_params) in enumerate(schedule):
        params = study.suggest(optuna.trial.FixedTrial(segment_params, number=number))
        model = study.build_model(params, data)  # each segment's own dropout; weights from the checkpoint
        config = study.train_config(params, study.full_fidelity)
        infra = study_infra(study, params, study.full_fidelity).replace(checkpoint_dir=tmp, resume=index > 0)
        hooks: tuple[Any, ...] = (progress,)
        if index + 1 < len(schedule):  # stop where the next params take over, with a checkpoint there
            end = schedule[index + 1][0]
            infra = infra.replace(checkpoint_at=frozenset({end}))
            hooks = (progress, lambda epoch, metrics, end=end: epoch >= end)
        if index > 0:
            infra = infra.replace(mutable=frozenset(mutable_params(study).values()))
        result = trainer.fit(model, data.train, data.val, data.task, config, infra=infra, sink=run, hooks=hooks)
        history += result.history
    return model, params, result, history
