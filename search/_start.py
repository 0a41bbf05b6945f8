"""``search start``: create or resume a study, run local workers, follow them, retrain the best."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search._errors import SearchError

if TYPE_CHECKING:
    from search._coordinator import Coordinator, StudyRecord
    from search._settings import Locations
    from studies import Study

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartOptions:
    study: str
    trials: int
    name: str | None = None
    workers: int | None = None
    sampler: str = "tpe"
    pruner: str = "hyperband"
    seed: int = 0
    max_retries: int = 2
    heartbeat_interval: int = 10
    grace_period: int = 60
    study_options: dict[str, Any] = field(default_factory=dict)
    retrain: bool = True
    quiet: bool = False
    gpus: str | None = None


@dataclass(frozen=True)
class PreparedStudy:
    study: Study
    record: StudyRecord
    name: str


def prepare(opts: StartOptions) -> PreparedStudy:
    """Validate everything that can be validated before anything is created."""
    from search import _algorithms
    from search._catalog import load_study, study_ref
    from search._coordinator import StudyRecord
    from search._space import record_space

    if opts.trials <= 0:
        raise SearchError(f"--trials must be a positive number of trials, got {opts.trials}")
    if opts.workers is not None and opts.workers < 0:
        raise SearchError(f"--workers must be >= 0, got {opts.workers}")
    if opts.max_retries < 0:
        raise SearchError(f"--max-retries must be >= 0, got {opts.max_retries}")
    _algorithms.validate(opts.sampler, opts.pruner)
    if opts.gpus is not None:
        from search._run import parse_gpus

        parse_gpus(opts.gpus)  # before the study exists, so a typo creates nothing
    ref = study_ref(opts.study)
    study = load_study(ref, opts.study_options)
    # A bad data file must fail here, in one line, not in every worker after the study exists.
    study.load_data()
    record = StudyRecord(
        study_ref=ref, metric=study.metric, direction=study.direction,
        search_epochs=study.search_fidelity.epochs, sampler=opts.sampler, pruner=opts.pruner,
        seed=opts.seed, max_retries=opts.max_retries, heartbeat_interval=opts.heartbeat_interval,
        grace_period=opts.grace_period, options=opts.study_options, space=record_space(study),
    )  # fmt: skip
    return PreparedStudy(study, record, opts.name or study.name)


def create_or_resume(loc: Locations, prepared: PreparedStudy, budget: int) -> tuple[Coordinator, bool]:
    """The study plus its MLflow experiment and parent run; a new study is removed if any part fails."""
    from search._coordinator import EXPERIMENT_ATTR, PARENT_RUN_ATTR, Coordinator
    from search._tracking import Tracker
    from storage import prepare_sqlite_tracking, resolve_tracking

    coordinator = Coordinator(loc.storage_url, prepared.name)
    optuna_study, created = coordinator.create_or_resume(prepared.record, budget)
    try:
        attrs = optuna_study.user_attrs
        if PARENT_RUN_ATTR not in attrs:
            location = resolve_tracking(loc.tracking_uri, loc.project_dir, loc.artifact_location)
            tracker = Tracker(location)
            experiment_id = tracker.experiment_id(prepared.name)
            prepare_sqlite_tracking(location)
            summary = {"study": prepared.record.study_ref, "direction": prepared.record.direction,
                       "metric": prepared.record.metric, "sampler": prepared.record.sampler,
                       "pruner": prepared.record.pruner, "seed": prepared.record.seed}  # fmt: skip
            parent = tracker.start_parent(experiment_id, prepared.name, summary)
            optuna_study.set_user_attr(EXPERIMENT_ATTR, experiment_id)
            optuna_study.set_user_attr(PARENT_RUN_ATTR, parent)
        elif not created:
            # A resumed study runs again: so does its parent run (it was FINISHED by the last search).
            tracker = Tracker(resolve_tracking(loc.tracking_uri, loc.project_dir, loc.artifact_location))
            tracker.client.update_run(str(attrs[PARENT_RUN_ATTR]), status="RUNNING")
    except BaseException:
        if created:
            coordinator.delete()
        raise
    return coordinator, created


def default_workers() -> int:
    """One worker per GPU; on CPU, one per two cores (each trial uses two threads)."""
    gpus = visible_gpus()
    if gpus:
        return len(gpus)
    return max(1, (os.cpu_count() or 2) // 2)


def visible_gpus() -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def spawn_workers(loc: Locations, name: str, count: int, gpus: list[str], debug: bool) -> list[subprocess.Popen[bytes]]:
    """Start ``count`` local ``search worker`` processes, logging to ``<project>/logs``."""
    from search._settings import location_env

    logs = loc.project_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // max(1, count)) if not gpus else 4
    procs = []
    for index in range(count):
        env = {**os.environ, **location_env(loc), "OMP_NUM_THREADS": str(threads)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        cmd = [sys.executable, "-m", "search", *(["--debug"] if debug else []), "worker",
               "--name", name, "--worker-index", str(index)]  # fmt: skip
        with open(logs / f"worker-{index}.log", "ab") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
    return procs


def wait_for_workers(procs: list[subprocess.Popen[bytes]], follow: Any) -> list[int]:
    """Call ``follow()`` about once a second until every worker has exited; forward Ctrl-C."""
    try:
        while any(p.poll() is None for p in procs):
            follow()
            time.sleep(1.0)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    follow()
    return [p.returncode for p in procs]


def worker_logs(loc: Locations) -> Path:
    return loc.project_dir / "logs"


def check_some_worker_succeeded(codes: list[int], loc: Locations) -> None:
    """All local workers failing is an error to report, not a study to wait on forever."""
    if not codes or any(code == 0 for code in codes):
        return
    log_file = worker_logs(loc) / "worker-0.log"
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()] \
        if log_file.exists() else []  # fmt: skip
    last = f": {lines[-1].strip()}" if lines else ""
    raise SearchError(f"all {len(codes)} local workers failed (exit codes {sorted(set(codes))}); {log_file}{last}")
