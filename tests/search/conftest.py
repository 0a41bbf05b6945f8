"""A study in a known state, written straight into its storage (no training): the views' test bed.

Trials of ``demo`` (4 search epochs, minimize val_loss, budget 8):
0 complete 0.5 | 1 pruned at epoch 2 | 2 complete 0.4 (best) | 3 failed at epoch 1 |
4 complete 0.55 | 5 pruned at epoch 1 | 6 running on nodeB, at epoch 3.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

SLEEP_STUDY = Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "sleep_study.py"

# The tests in the folders below import ``search_helpers``, which sits next to this file.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _no_outage_from_an_earlier_test():
    """This process's outage clocks start clear: an outage another test of the same xdist process
    caused (or its grace after it) would make this test's reaper skip its pass."""
    from search.coordination import _resilience

    for clock in (_resilience.OUTAGE, _resilience.TRACKING_OUTAGE, _resilience.ROW_LOCKS):
        clock.since = clock.ended = None


SEARCH_EPOCHS = 4
BUDGET = 8
CURVES: list[tuple[str, list[float], str]] = [
    ("COMPLETE", [1.0, 0.8, 0.6, 0.5], "nodeA:11:0"),
    ("PRUNED", [1.3, 1.2], "nodeB:22:0"),
    ("COMPLETE", [0.9, 0.6, 0.45, 0.4], "nodeA:11:0"),
    ("FAIL", [1.1], "nodeB:22:0"),
    ("COMPLETE", [0.95, 0.7, 0.6, 0.55], "nodeA:11:0"),
    ("PRUNED", [1.5], "nodeB:22:0"),
]
RUNNING = {"worker": "nodeB:22:0", "host": "nodeB", "epoch": 3}


@dataclass(frozen=True)
class DemoStudy:
    url: str
    name: str
    project_dir: Path
    """Holds the embedded MLflow store (and, for SQLite, the study)."""

    def flags(self) -> list[str]:
        """What a user passes to reach this study from any directory."""
        return ["--name", self.name, "--storage", self.url, "--project-dir", str(self.project_dir)]


def _distributions() -> dict[str, Any]:
    from optuna.distributions import FloatDistribution, IntDistribution

    return {"lr": FloatDistribution(1e-4, 1e-1, log=True), "width": IntDistribution(32, 512)}


def _frozen(number: int, state: str, curve: list[float], worker: str, start: datetime) -> Any:
    from optuna.trial import FrozenTrial, TrialState

    values = dict(enumerate(curve, start=1))
    attrs: dict[str, Any] = {"worker": worker, "host": worker.split(":")[0], "epoch": len(curve)}
    if state != "FAIL":
        attrs["epochs_run"] = len(curve)
    else:
        attrs["fail_reason"] = "diverged at epoch 1"
    return FrozenTrial(
        number=number, state=TrialState[state], value=curve[-1] if state == "COMPLETE" else None,
        datetime_start=start, datetime_complete=start + timedelta(seconds=10 * len(curve)),
        params={"lr": 10 ** -(1 + number % 3), "width": 64 * (1 + number)}, distributions=_distributions(),
        user_attrs=attrs, system_attrs={}, intermediate_values=values, trial_id=number,
    )  # fmt: skip


def make_demo_study(url: str, project_dir: Path, name: str = "demo", trials: int = len(CURVES),
                    running: bool = True, tracking: bool = False) -> DemoStudy:  # fmt: skip
    """Create ``name`` in ``url`` with the first ``trials`` finished trials (and the running one)."""
    project_dir.mkdir(parents=True, exist_ok=True)
    from search.api import StartOptions, prepare
    from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR, Coordinator
    from search.settings import SearchSettings

    # The record `search start --study resmlp --study-option search_epochs=4` writes, so it can resume it.
    opts = StartOptions(
        study="resmlp",
        trials=BUDGET,
        settings=SearchSettings(pruner="median"),
        study_options={"search_epochs": SEARCH_EPOCHS},
    )
    study, _ = Coordinator(url, name).create_or_resume(prepare(opts).record, BUDGET)
    start = datetime.now() - timedelta(minutes=10)
    for number, (state, curve, worker) in enumerate(CURVES[:trials]):
        study.add_trial(_frozen(number, state, curve, worker, start + timedelta(seconds=30 * number)))
    if running:
        trial = study.ask(_distributions())
        for key in ("worker", "host"):  # its epoch is the last one it reported
            trial.set_user_attr(key, RUNNING[key])
        for step, value in enumerate([1.0, 0.7, 0.6], start=1):
            trial.report(value, step)
    if tracking:
        experiment_id, parent = _mlflow_parent(project_dir, name)
    else:
        experiment_id, parent = "7", None
    study.set_user_attr(EXPERIMENT_ATTR, experiment_id)
    if parent:
        study.set_user_attr(PARENT_RUN_ATTR, parent)
    return DemoStudy(url, name, project_dir)


def _mlflow_parent(project_dir: Path, name: str) -> tuple[str, str]:
    import storage
    from search.tracking import Tracker

    tracker = Tracker(storage.resolve_tracking(None, project_dir))
    experiment_id = tracker.experiment_id(name)
    return experiment_id, tracker.start_parent(experiment_id, name, {"study": "resmlp"})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def study_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test against the embedded SQLite file and a real PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    import storage

    project = tmp_path / "project"
    project.mkdir()
    return storage.sqlite_url(project / "optuna.db")


@pytest.fixture
def make_demo() -> Any:
    """:func:`make_demo_study`, for tests that need a study in another state."""
    return make_demo_study


@pytest.fixture
def claimed_sleep_trial(tmp_path: Path) -> Any:
    """``make(settings=None, study=SLEEP_STUDY, options=None)``: a one-trial study (the sleep study's
    epochs of no time unless told otherwise; pruner ``none`` unless ``settings`` say otherwise) in
    embedded stores under ``tmp_path``, a worker's context on it, and the trial that worker claimed,
    as ``(ctx, trial)``."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.settings import SearchSettings

    def make(settings: Any = None, study: Path = SLEEP_STUDY, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
        loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
        opts = StartOptions(study=str(study), trials=1, settings=settings or SearchSettings(pruner="none"),
                            study_options={"epoch_seconds": 0.0} if options is None else options)  # fmt: skip
        create_or_resume(loc, prepare(opts), 1)
        ctx = connect(loc, study.stem.removesuffix("_study"), "test-worker")
        trial, _ = ctx.coordinator.claim(ctx.optuna_study)
        return ctx, trial

    return make


@pytest.fixture
def demo_study(study_url: str, tmp_path: Path) -> DemoStudy:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return make_demo_study(study_url, project)


@pytest.fixture
def sqlite_demo(tmp_path: Path) -> DemoStudy:
    """The demo study in the embedded store only, for tests of what is drawn rather than stored."""
    import storage

    project = tmp_path / "project"
    project.mkdir()
    return make_demo_study(storage.sqlite_url(project / "optuna.db"), project)


@pytest.fixture
def search_main(capsys: pytest.CaptureFixture[str]) -> Any:
    """Run ``search ARGV`` in this process (its imports are warm) through the console entry point;
    returns ``(exit code, stdout, stderr)``."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        from search.cli import main

        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def warm_cli(search_main: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``cli`` fixture's call (``*args, cwd, env, check``, a ``CompletedProcess`` back) run in this
    process, whose imports are warm: for the commands that only read a study (``status``, ``trials``,
    ``best``, ``report``, ``export``), each of which costs seconds of imports in a fresh interpreter.
    As there, the command sees ``cwd`` as its working directory and no ``SEARCH_*`` variable or
    MLflow URI variable but those in ``env``; MLflow's URIs are put back afterwards, so one call
    cannot point the next at its stores. ``search start`` and the workers keep running as processes."""

    def run(*args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = False,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        del timeout  # the subprocess runner's; an in-process call has none
        mlflow_globals = _mlflow_uri_globals()
        with monkeypatch.context() as patch:
            patch.chdir(cwd)
            for name in [k for k in os.environ if k.startswith("SEARCH_")] + list(_MLFLOW_URI_VARIABLES):
                patch.setenv(name, "")  # records the value (or its absence) for the undo
                patch.delenv(name)
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            try:
                code, out, err = search_main(list(args))
            finally:
                _restore_mlflow_uri_globals(mlflow_globals)
        proc = subprocess.CompletedProcess(["search", *args], code, out, err)
        if check and code != 0:
            raise AssertionError(f"search {' '.join(args)} exited {code}\n{out}\n{err}")
        return proc

    return run


_MLFLOW_URI_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


def _mlflow_uri_globals() -> tuple[Any, Any] | None:
    if "mlflow" not in sys.modules:
        return None
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    return tracking._tracking_uri, registry._registry_uri


def _restore_mlflow_uri_globals(saved: tuple[Any, Any] | None) -> None:
    if "mlflow" not in sys.modules:
        return
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    tracking._tracking_uri, registry._registry_uri = saved if saved is not None else (None, None)
