"""The retrain of a trial that population-based training made: its lineage's params, replayed.

A trial under ``--pruner pbt`` was trained by a chain of attempts, each going on from a copy of a
better trial's checkpoint with perturbed params (``search.settings._freeze_thaw.lineage``). Its
retrain replays that schedule at full scale: the epochs where the params changed are scaled from the
search's epochs to the full training's, and each segment resumes the previous one's checkpoint with
the new values (``trainer.Infra.mutable``). Any other trial is one segment: a plain fit.

A k-fold trial's retrain (every fold's rows, none held out to pick an epoch by) stops at its folds'
mean best epoch, scaled the same way (``kfold_stop``): where one split's retrain keeps its best
validation epoch, the folds say where the best epoch was.
"""

from __future__ import annotations

import json
import statistics
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


def kfold_stop(attrs: dict[str, Any], search_epochs: int, full_epochs: int) -> tuple[int, float] | None:
    """A k-fold trial's retrain length: the mean of its folds' best epochs (``fold_<k>_best_epoch``)
    scaled from the search's epochs to the full training's (1 to ``full_epochs``), and that mean;
    None for a trial that recorded none."""
    bests = [float(v) for k, v in attrs.items() if k.startswith("fold_") and k.endswith("_best_epoch")]
    if not bests:
        return None
    mean = statistics.fmean(bests)
    return max(1, min(full_epochs, round(mean * full_epochs / search_epochs))), mean


def kfold_note(folds: int, stop: tuple[int, float] | None, search_epochs: int) -> str:
    """What a k-fold retrain trained on, and where it stopped."""
    where = "" if stop is None else f", to the folds' mean best epoch ({stop[1]:.3g} of {search_epochs}, scaled)"
    return f"on all {folds} folds' rows{where}"


def schedule_json(schedule: list[tuple[int, dict[str, Any]]]) -> str:
    """``[[epoch, params], ...]``: the retrain run's ``hpsearch.pbt_schedule`` tag."""
    return json.dumps([[epoch, dict(params)] for epoch, params in schedule])


def fit_schedule(study: Any, data: Any, number: int, schedule: list[tuple[int, dict[str, Any]]], tmp: Path,
                 progress: Any, run: Any, stop_at: int | None = None,
                 ) -> tuple[Any, Any, Any, list[dict[str, float]]]:  # fmt: skip
    """Fit each segment of ``schedule`` in turn in ``tmp`` (the last one ends after epoch ``stop_at``
    when given); the last segment's model, params and fit result, and every epoch's metrics."""
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
        elif stop_at is not None:  # the schedule's learning rate as at full length, its weights at stop_at
            hooks = (progress, lambda epoch, metrics: epoch >= stop_at)
        if index > 0:
            infra = infra.replace(mutable=frozenset(mutable_params(study).values()))
        result = trainer.fit(model, data.train, data.val, data.task, config, infra=infra, sink=run, hooks=hooks)
        history += result.history
    return model, params, result, history
