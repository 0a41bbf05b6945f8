"""Retrain the best trial at full scale, test it once, log and register the model.

The best params are replayed through ``optuna.trial.FixedTrial`` into the study's own
``suggest``/``build_model``/``train_config``: the retrained model is built by the same code path
as every searched one.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR
from search.exceptions import SearchError
from search.settings import champion_number, gate_objective, load_study, params_dict
from search.tracking._deployment import deployment_metrics, missed_at_full_scale
from search.tracking._portable import log_portable
from search.tracking._replay import fit_schedule, kfold_note, kfold_stop, replay_schedule, schedule_json
from search.tracking._tracker import Tracker

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations

log = logging.getLogger(__name__)
CHAMPION = "champion"


@dataclass(frozen=True)
class RetrainResult:
    study: str
    trial: int
    params: dict[str, Any]
    val_metrics: dict[str, float]
    test_metrics: dict[str, float]
    model_name: str
    version: str
    champion_version: str
    became_champion: bool
    run_id: str
    notes: list[str] = field(default_factory=list)

    @property
    def model_uri(self) -> str:
        pinned = self.became_champion or self.champion_version  # else no champion: this version itself
        return f"models:/{self.model_name}@{CHAMPION}" if pinned else f"models:/{self.model_name}/{self.version}"


class RetrainProgress(Protocol):
    """Told what the retrain is doing, so a person waiting sees it move (``search.observation``)."""

    def started(self, trial: int, epochs: int) -> None: ...

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        """After each full-scale epoch (a trainer hook: returns False, never stops the retrain)."""
        ...

    def done(self, step: str, detail: str, seconds: float) -> None:
        """A phase finished: ``trained``, ``tested``, ``exported``, ``registered``."""
        ...


class _Silent:
    def started(self, trial: int, epochs: int) -> None:
        pass

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        return False

    def done(self, step: str, detail: str, seconds: float) -> None:
        pass


def pick_trial(coordinator: Coordinator, number: int | None) -> Any:
    from optuna.trial import TrialState

    trials, record = coordinator.load().get_trials(deepcopy=False), coordinator.read_record()
    if number is None:  # the champion by the study's --select, among trials that meet its constraints
        if not any(t.state == TrialState.COMPLETE for t in trials):
            raise SearchError(f"study {coordinator.study_name!r} has no complete trial to retrain")
        number = champion_number(trials, record.maximize(), record.settings.select)
        if number is None:
            raise SearchError(f"no complete trial of study {coordinator.study_name!r} meets its constraints "
                              f"({', '.join(record.constraints)}): nothing to retrain and register")  # fmt: skip
    found = [t for t in trials if t.number == number]
    if not found:
        raise SearchError(f"study {coordinator.study_name!r} has no trial {number}")
    if found[0].state != TrialState.COMPLETE:
        raise SearchError(f"trial {number} is {found[0].state.name}, not COMPLETE; pick a complete trial")
    if any(v > 0 for v in found[0].constraints.values()):  # never registered, so never the champion
        raise SearchError(f"trial {number} does not meet the study's constraints ({', '.join(record.constraints)}); "
                          "pick a feasible trial")  # fmt: skip
    return found[0]


def retrain_and_register(coordinator: Coordinator, loc: Locations, trial_number: int | None = None,
                         progress: RetrainProgress | None = None) -> RetrainResult:  # fmt: skip
    """Full-scale fit of one trial's params, a single test evaluation, then log, register and alias;
    ``progress`` is told each epoch and each phase as it ends."""
    import optuna

    import trainer
    from studies import study_infra

    progress = progress or _Silent()
    best = pick_trial(coordinator, trial_number)
    record = coordinator.read_record()
    study = load_study(record.study_ref, record.options, record.narrow)
    clock = time.monotonic()
    progress.started(best.number, study.full_fidelity.epochs)
    params = study.suggest(optuna.trial.FixedTrial(best.params, number=best.number))
    data = study.load_data()
    tracker = Tracker(loc.tracking())
    attrs = coordinator.load().user_attrs
    run = tracker.start_child(
        str(attrs[EXPERIMENT_ATTR]), str(attrs[PARENT_RUN_ATTR]), f"retrain-trial-{best.number}", "retrain",
        {"retrain": "true", "hpsearch.source_trial": best.number},
    )  # fmt: skip
    run_id = str(run.run_id)  # start_child returns a created run
    run.log_params({"trial_number": best.number, **params_dict(params),  # sent with the first epoch
                    "latency_batch": record.settings.latency_batch})  # fmt: skip
    schedule = replay_schedule(coordinator, best, record.search_epochs, study.full_fidelity.epochs)
    replayed = {"hpsearch.pbt_schedule": schedule_json(schedule)} if len(schedule) > 1 else {}
    stop = kfold_stop(best.user_attrs, record.search_epochs, study.full_fidelity.epochs) if data.folds else None
    with tempfile.TemporaryDirectory(prefix="hpsearch-retrain-") as tmp:
        model, params, result, history = fit_schedule(study, data, best.number, schedule, Path(tmp), progress, run,
                                                      stop_at=None if stop is None else stop[0])  # fmt: skip
        run.flush()  # the epochs' batches are written in the background
        if result.best_checkpoint is not None and not data.folds:  # k-fold: no row held out, the last epoch's
            trainer.load_model_weights(model, result.best_checkpoint)
    val_metrics = {k: v for k, v in history[result.best_epoch - 1].items() if k.startswith("val_") and not data.folds}
    trained = kfold_note(len(data.folds), stop, record.search_epochs) if data.folds else \
        f"best epoch {result.best_epoch}: {record.metric} {val_metrics.get(record.metric, math.nan):.4g}"  # fmt: skip
    clock = _phase(progress, "trained", f"{len(history)} epochs, {trained}", clock)
    config, infra = study.train_config(params, study.full_fidelity), study_infra(study, params, study.full_fidelity)
    test_metrics = {
        k.replace("val_", "test_", 1): v
        for k, v in trainer.evaluate(model, data.test, data.task, config, infra=infra).items()
    }
    # On the training device, before the export moves the model to the CPU.
    deployment = deployment_metrics(model, data.test, result, mixed_precision=config.mixed_precision,
                                    batch=record.settings.latency_batch, timed=True)  # fmt: skip
    tracker.log_metrics(run_id, test_metrics | deployment)
    _log_test_artifacts(tracker, run_id, model, data)
    clock = _phase(progress, "tested", ", ".join(f"{k} {v:.4g}" for k, v in sorted(test_metrics.items())), clock)
    exports = log_portable(tracker, run_id, export_model(model, data), data)
    clock = _phase(
        progress, "exported", ", ".join(c.format if c.ok else f"{c.format} failed" for c in exports) or "nothing", clock
    )
    model_name = coordinator.study_name
    version = _log_and_register(tracker, run_id, model, data, model_name)
    for key, value in deployment.items():  # what serving it costs, where the registry shows it
        tracker.client.set_model_version_tag(model_name, version, f"hpsearch.{key}", f"{value:g}")
    _phase(progress, "registered", f"MLflow model {model_name!r} version {version}", clock)
    gate = gate_objective(record.goals(), record.metric, record.direction)  # a model metric the test set has
    test_key = gate.metric.replace("val_", "test_", 1)
    if missed := missed_at_full_scale(record.limits(), deployment):  # registered, never the champion
        became, champion, notes = _champion_stays(tracker, model_name, version, "; ".join(missed))
    else:
        became, champion, notes = _move_champion(tracker, model_name, version, test_key, test_metrics, gate.direction)
    notes = [*notes, *(check.line() for check in exports)]
    run.finish({"hpsearch.model_version": version, "hpsearch.champion": str(became).lower(), **replayed}, "FINISHED")
    return RetrainResult(coordinator.study_name, best.number, params_dict(params), val_metrics, test_metrics,
                         model_name, version, champion, became, run_id, notes)  # fmt: skip


def _phase(progress: RetrainProgress, step: str, detail: str, since: float) -> float:
    now = time.monotonic()
    progress.done(step, detail, now - since)
    return now


def _predict(model: Any, x: Any, batch: int = 1024) -> Any:
    import torch

    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        return torch.cat([model(x[i : i + batch].to(device)).float().cpu() for i in range(0, len(x), batch)])


def _log_test_artifacts(tracker: Any, run_id: str, model: Any, data: Any) -> None:
    """Classification report and confusion matrix on the test split (classification studies only)."""
    import trainer

    if not isinstance(data.task, trainer.Classification) or not hasattr(data.test, "x"):
        return
    from sklearn.metrics import classification_report, confusion_matrix

    y_true = data.test.y.cpu().numpy()
    y_pred = _predict(model, data.test.x).argmax(dim=-1).numpy()
    labels = list(range(data.task.num_classes))
    names = [str(n) for n in (data.class_names or labels)]
    report = classification_report(y_true, y_pred, labels=labels, target_names=names, zero_division=0, digits=4)
    tracker.client.log_text(run_id, report, "test/classification_report.txt")
    matrix = confusion_matrix(y_true, y_pred, labels=labels)
    tracker.client.log_figure(run_id, _confusion_figure(matrix, names), "test/confusion_matrix.png")


def _confusion_figure(matrix: Any, names: list[str]) -> Any:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.5 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set(xticks=range(len(names)), yticks=range(len(names)), xticklabels=names, yticklabels=names,
           xlabel="predicted", ylabel="true", title="Test confusion matrix")  # fmt: skip
    for (i, j), count in np.ndenumerate(matrix):
        ax.text(j, i, str(count), ha="center", va="center", color="black" if count < matrix.max() / 2 else "white")
    fig.tight_layout()
    return fig


def export_model(model: Any, data: Any) -> Any:
    """The model as users call it: raw input rows in (preprocessing included), outputs out, on CPU."""
    from torch import nn

    model = model.cpu().eval()
    return (nn.Sequential(data.preprocess, model) if data.preprocess is not None else model).cpu().eval()


def pt2_requirements() -> list[str]:
    """What a model logged in MLflow's pt2 format needs besides MLflow (which adds its own pin):
    MLflow's PyTorch flavor's defaults (torch, without a local label such as ``+cpu``, and
    cloudpickle) and what its pyfunc loader works with (NumPy, pandas), at the installed versions.
    MLflow's inference found these here (and tqdm, which MLflow's own import brings in)."""
    import cloudpickle
    import numpy
    import pandas
    import torch

    torch_version = torch.__version__.split("+", 1)[0]
    return [f"torch=={torch_version}", f"cloudpickle=={cloudpickle.__version__}",
            f"numpy=={numpy.__version__}", f"pandas=={pandas.__version__}"]  # fmt: skip


def _log_and_register(tracker: Any, run_id: str, model: Any, data: Any, model_name: str) -> str:
    import mlflow
    import numpy as np
    import torch
    from mlflow.models import infer_signature

    exported = export_model(model, data)
    example = data.raw_example
    test_x = getattr(data.test, "x", None)
    if example is None and data.preprocess is None and test_x is not None:
        example = test_x[:5].cpu().numpy()  # without preprocessing, test rows are raw rows
    signature = None
    if example is not None:
        with torch.no_grad():
            output = exported(torch.as_tensor(example)).numpy()
        signature = infer_signature(np.asarray(example), output)
    mlflow.set_tracking_uri(tracker.location.tracking_uri)
    mlflow.set_registry_uri(tracker.location.registry_uri)
    # MLflow's default format (pt2) traces the model on the input example; without one, pickle it.
    # A pt2 file loads with torch alone (the graph holds no study code), so its requirements are
    # known: MLflow's inference of them reloads the model in a new Python process (7-8 s here). A
    # pickled model may import whatever its study's code does: that is inferred.
    fmt = {"pip_requirements": pt2_requirements()} if example is not None else {"serialization_format": "pickle"}
    with mlflow.start_run(run_id=run_id), warnings.catch_warnings():
        # MLflow reloads the pt2 file to check the input example, and torch's archive reader (2.11)
        # warns about its own read-only buffers and shared storages: nothing a user can act on.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.export\.pt2_archive")
        info = mlflow.pytorch.log_model(exported, name="model", signature=signature, input_example=example, **fmt)
    with contextlib.redirect_stderr(io.StringIO()) as said:  # MLflow prints "Created version '1' ..." itself
        version = mlflow.register_model(info.model_uri, model_name)
    log.debug("mlflow: %s", said.getvalue().strip())
    return str(version.version)


def _move_champion(tracker: Any, name: str, version: str, key: str, metrics: dict[str, float],
                   direction: str) -> tuple[bool, str, list[str]]:  # fmt: skip
    """Point ``champion`` at ``version`` only if its test metric beats the current champion's."""
    from mlflow.exceptions import MlflowException

    client = tracker.client
    new_value = metrics.get(key)
    try:
        current = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        current = None
    if current is not None:
        if new_value is None or math.isnan(new_value):
            note = f"champion stays at version {current.version}: version {version} has no {key} to compare"
            return False, str(current.version), [note]
        old_value = client.get_run(current.run_id).data.metrics.get(key)
        if old_value is not None and not math.isnan(old_value) and not _beats(new_value, old_value, direction):
            note = (f"champion stays at version {current.version}: its {key} {old_value:.4f} is not beaten "
                    f"by version {version}'s {new_value:.4f}")  # fmt: skip
            return False, str(current.version), [note]
    client.set_registered_model_alias(name, CHAMPION, version)
    return True, version, []


def _champion_stays(tracker: Any, name: str, version: str, why: str) -> tuple[bool, str, list[str]]:
    from mlflow.exceptions import MlflowException

    try:
        current = str(tracker.client.get_model_version_by_alias(name, CHAMPION).version)
    except MlflowException:
        current = ""
    stays = f"champion stays at version {current}" if current else "no champion"
    return False, current, [f"{stays}: version {version} at full scale: {why}"]


def _beats(new: float, old: float, direction: str) -> bool:
    return new < old if direction == "minimize" else new > old
