"""K-fold trials (``StudyData.folds``): one fit per fold, each fold's value reported at step = fold index.

A trial with K folds fits them in order. Inside a fold nothing is reported to the pruner (epochs of
different folds are not comparable), and ``--patience`` ends the fold's training as it ends a
one-split trial. Once a fold ends, its value (its best epoch's metric, as a one-split trial's) and
final metrics are recorded on the trial (user attributes ``fold_<k>_<metric>``,
``fold_<k>_final_metrics``, ``fold_<k>_epochs``, ``fold_<k>_best_epoch``) and its MLflow run, then
reported at step k; the pruner (``wilcoxon`` by default, ``search/settings/pruners/_wilcoxon.py``) is
asked after each fold but the last. The trial's value is the mean of its folds' values.

A retry inherits its attempt's reported values and attributes (``search.coordination``'s
``RetryDeadTrial``), so it fits only the folds whose value was not reported yet, the fold that was
running resumed from its own checkpoints (``trial-<n>/fold-<k>``). The attributes of a fold are
written before its value is reported: a reported fold always has them.
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.coordination import retrying
from search.execution._metrics import final_metrics
from search.execution._refit import fit_or_start_over
from search.execution._suggest import suggest_params
from search.settings import epochs_since_best, params_dict
from search.tracking import deployment_metrics
from storage import cached_frozen_trial, set_user_attrs, trial_id

if TYPE_CHECKING:
    import optuna

    from search.execution._context import WorkerContext
    from search.execution._pruning import PruningHook
    from search.execution._watchdog import Progress
    from search.tracking import RunLogger


@dataclass(frozen=True)
class FoldsResult:
    """The folds of a trial, shaped as the ``trainer.FitResult`` that ``finish_ok`` reads.

    ``history`` has two entries: first the study metric's mean over the folds' values (the trial's
    value: each fold's best epoch), then the mean over folds of every final metric (each fold's last
    epoch). The best of the two is the first (a fold's best epoch is at least as good as its last),
    and the final metrics are the second, as for a one-split trial.
    """

    history: list[dict[str, float]]
    epochs_run: int
    """Epochs trained over every fold, those of folds an earlier attempt finished included."""
    best_epoch: int = 0
    fit_seconds: float = 0.0
    callback_seconds: float = 0.0
    samples_per_second: float = 0.0
    peak_memory_mb: float | None = None
    peak_rss_mb: float | None = None
    stopped_early: bool = False  # patience ends folds, not the trial
    resumed_from_epoch: int = 0
    mutations: tuple[Any, ...] = field(default=())


def _epochs(result: Any, metric: str) -> list[Mapping[str, float]]:
    """A fold's epochs that report ``metric``: those its resumed checkpoint kept, then this call's."""
    rows = [*getattr(result, "resumed_curve", {}).values(), *result.history]
    return [h for h in rows if metric in h and math.isfinite(h[metric])]


def fold_value(result: Any, metric: str, maximize: bool) -> float:
    """A fold's value: the best epoch's ``metric``, as a one-split trial's. A fold resumed from a
    checkpoint has the epochs before it from the checkpoint's curve; for ``val_loss`` the fit's
    ``best_val_loss`` (restored from the checkpoint) covers them too, where an older checkpoint kept
    no curve."""
    values = [h[metric] for h in _epochs(result, metric)]
    if metric == "val_loss" and math.isfinite(result.best_val_loss):
        values.append(result.best_val_loss)
    if not values:
        raise ValueError(f"the study metric {metric!r} was never reported")
    return max(values) if maximize else min(values)


def fold_best_epoch(result: Any, metric: str, maximize: bool) -> int:
    """The epoch of a fold's value (what its retrain stops at, scaled: ``search.tracking._replay``):
    the trainer's best for ``val_loss`` (a resumed fold's too), else the best epoch it reported."""
    if metric == "val_loss" and result.best_epoch:
        return int(result.best_epoch)
    rows = _epochs(result, metric)
    pick = max if maximize else min
    return int(pick(rows, key=lambda h: h[metric]).get("epoch", result.best_epoch)) if rows else int(result.best_epoch)


def summarize(metric: str, values: Sequence[float], finals: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """The mean over folds of ``metric``'s ``values``, their spread (sample standard deviation), and
    the mean of each final metric that every fold has: ``{"value", "std", "final"}``."""
    keys = set.intersection(*(set(f) for f in finals)) if finals else set()
    final = {k: statistics.fmean(f[k] for f in finals) for k in sorted(keys)}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"value": statistics.fmean(values), "std": std, "final": final}


def done_folds(trial: optuna.trial.Trial) -> dict[int, float]:
    """Folds whose value the trial reported already (inherited by a retry): fold -> value."""
    return {int(k): float(v) for k, v in cached_frozen_trial(trial).intermediate_values.items()}


class _FoldPatience:
    """``--patience`` inside one fold: stop once its metric has not improved for that many epochs."""

    def __init__(self, metric: str, patience: int, maximize: bool) -> None:
        self.metric, self.patience, self.maximize = metric, patience, maximize
        self.curve: dict[int, float] = {}

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        self.curve[epoch] = float(metrics[self.metric])
        return bool(self.patience) and epochs_since_best(self.curve, epoch, self.maximize) >= self.patience


class _FoldSink:
    """Logs fold k's epoch e at step ``k * epochs + e`` with a ``fold`` metric: one curve per metric
    on the trial's MLflow run, the folds one after another."""

    def __init__(self, sink: Any, fold: int, epochs: int) -> None:
        self.sink, self.fold, self.offset = sink, fold, fold * epochs

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.sink.log({**metrics, "fold": float(self.fold)}, step=step + self.offset)


def fit_folds(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, ckpt_dir: Path, hook: PruningHook,
              progress: Progress, board: Any = None, patience: int = 0,
              ) -> tuple[FoldsResult, dict[str, float]]:  # fmt: skip
    """Fit the folds the trial has not reported yet; ``hook`` (without patience) reports each fold's
    value at step = fold index and asks the pruner after each but the last (``hook.pruned_epoch``:
    the fold after which it was pruned). Returns the folds' result and the last fitted model's
    deployment metrics (none when pruned, or when every fold was fitted by an earlier attempt)."""
    import trainer
    from studies import study_infra

    if ctx.gang is not None:
        raise ValueError("folds: a k-fold trial trains on one process; run its workers without --gpus-per-trial")
    metric, maximize = ctx.record.metric, ctx.record.direction == "maximize"
    folds, fidelity = ctx.data.folds, ctx.study.search_fidelity
    params = suggest_params(ctx.study, ctx.coordinator.storage, trial)
    config = ctx.study.train_config(params, fidelity)
    base_infra = study_infra(ctx.study, params, fidelity).replace(
        resume=True, keep_last=2, checkpoint_every=ctx.record.settings.checkpoint_every, checkpoint_last=False,
    )  # fmt: skip
    run.log_params({"trial_number": trial.number, "folds": len(folds), **params_dict(params)})
    sink: Any = run if board is None else trainer.FanOut(run, board)
    inherited = cached_frozen_trial(trial).user_attrs
    values, finals, epochs = {}, {}, 0
    for k, v in done_folds(trial).items():
        values[k], finals[k] = v, dict(inherited.get(f"fold_{k}_final_metrics", {}))
        epochs += int(inherited.get(f"fold_{k}_epochs", 0))
    fits: list[Any] = []
    model: Any = None
    val: Any = None  # the last fitted fold's validation rows: where its model's latency is measured
    for k, fold in enumerate(folds):
        if k in values:
            continue
        model, val = ctx.study.build_model(params, ctx.data), fold.val
        progress.watch(model)
        stop = _FoldPatience(metric, patience, maximize)
        fold_dir = ckpt_dir / f"fold-{k}"

        def fit(config: Any, infra: Any, model: Any = model, fold: Any = fold, k: int = k, stop: Any = stop) -> Any:
            train = ctx.search_folds[k] if ctx.search_folds else fold.train
            return trainer.fit(model, train, fold.val, ctx.data.task, config, infra=infra,
                               hooks=[stop], sink=_FoldSink(sink, k, config.epochs), on_step=progress.step)  # fmt: skip

        result = fit_or_start_over(fit, config, base_infra.replace(checkpoint_dir=fold_dir),
                                   f"trial {trial.number} fold {k}")  # fmt: skip
        fits.append(result)
        values[k], finals[k] = fold_value(result, metric, maximize), final_metrics(result.history)
        epochs += result.epochs_run
        _record_fold(ctx, trial, run, k, values[k], finals[k], result.epochs_run,
                     fold_best_epoch(result, metric, maximize))  # fmt: skip
        shutil.rmtree(fold_dir, ignore_errors=True)  # a reported fold is never fitted again
        if _report(hook, trial, k, values[k], last=k == len(folds) - 1):
            break
    deployment = {} if model is None else deployment_metrics(
        model, val, fits[-1], mixed_precision=config.mixed_precision, batch=ctx.record.settings.latency_batch,
        timed=hook.pruned_epoch is None)  # fmt: skip
    return _result(ctx, trial, run, values, finals, epochs, fits), deployment


def _record_fold(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, k: int, value: float,
                 final: Mapping[str, float], epochs: int, best_epoch: int) -> None:  # fmt: skip
    metric = ctx.record.metric
    attrs = {f"fold_{k}_{metric}": value, f"fold_{k}_final_metrics": dict(final), f"fold_{k}_epochs": epochs,
             f"fold_{k}_best_epoch": best_epoch}  # fmt: skip
    retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial_id(trial), attrs), f"recording trial {trial.number}")
    run.log({f"fold_{k}_{metric}": value}, step=k)


def _report(hook: PruningHook, trial: optuna.trial.Trial, k: int, value: float, last: bool) -> bool:
    """Report fold ``k``'s value at step k, stored at once; ask the pruner unless it is the last fold
    (pruning it would save nothing). Whether the trial is pruned."""
    if last:  # stored with the tell
        cached_frozen_trial(trial).intermediate_values[k] = hook.unstored[k] = value
        return False
    hook.checkpoint_saved(k)  # stored now: a retry must find every finished fold
    return bool(hook(k, {hook.metric: value}))


def _result(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, values: Mapping[int, float],
            finals: Mapping[int, Mapping[str, float]], epochs: int, fits: list[Any]) -> FoldsResult:  # fmt: skip
    metric, folds = ctx.record.metric, sorted(values)
    summary = summarize(metric, [values[k] for k in folds], [finals[k] for k in folds if finals[k]])
    if len(folds) == len(ctx.data.folds):  # a pruned trial's mean would be over some folds only
        attrs = {"folds": len(folds), f"{metric}_fold_mean": summary["value"], f"{metric}_fold_std": summary["std"]}
        retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial_id(trial), attrs),
                 f"recording trial {trial.number}")  # fmt: skip
        run.log({k: v for k, v in attrs.items() if k != "folds"}, step=len(folds) - 1)
    memory = [f.peak_memory_mb for f in fits if f.peak_memory_mb is not None]
    rss = [f.peak_rss_mb for f in fits if f.peak_rss_mb is not None]
    return FoldsResult(
        history=[{metric: summary["value"]}, summary["final"]],
        epochs_run=epochs,
        best_epoch=fits[-1].best_epoch if fits else 0,
        fit_seconds=sum(f.fit_seconds for f in fits),
        callback_seconds=sum(f.callback_seconds for f in fits),
        samples_per_second=statistics.fmean(f.samples_per_second for f in fits) if fits else 0.0,
        peak_memory_mb=max(memory, default=None),
        peak_rss_mb=max(rss, default=None),
    )
