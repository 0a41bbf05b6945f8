"""A worker: join a study, load data once, run trials until the budget is spent."""

from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from search.coordination import (
    INTERRUPTED,
    PARENT_RUN_ATTR,
    Coordinator,
    fail_and_retry,
    retrying,
)
from search.exceptions import SearchError
from search.execution._context import ParentRun, TrialOutcome, WorkerContext
from search.execution._early import preloaded
from search.execution._machine import ENV_GPU_MEMORY_FRACTION, idle_wait
from search.execution._paused_disk import bound_paused_disk, discard_paused
from search.execution._trial import run_trial
from search.settings import load_study, study_dir
from search.tracking import Tracker

if TYPE_CHECKING:
    import optuna

    from search.settings import Locations, StudyRecord
    from trainer import TrainData

log = logging.getLogger(__name__)
IDLE_POLL_S = 2.0


@dataclass
class WorkerReport:
    worker_id: str
    outcomes: list[TrialOutcome] = field(default_factory=list)


def search_subset(data: TrainData, fraction: float, seed: int) -> TrainData:
    """A fixed random ``fraction`` of the training split (the search fidelity's data budget)."""
    if fraction >= 1.0:
        return data
    import torch

    n = len(data)  # type: ignore[arg-type]
    keep = max(1, int(round(n * fraction)))
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(n, generator=generator)[:keep].sort().values
    if hasattr(data, "subset"):
        return data.subset(indices)
    return torch.utils.data.Subset(data, indices.tolist())


def check_trains_here(study: Any) -> None:
    """Refuse, in one line, a study whose trials cannot train on this machine: fp16 autocast where
    they would train on CPU (no CUDA GPU, or the study's ``train_infra`` asks for the CPU).

    Every trial would fail the same way within a second and spend the study's budget, so ``search
    start`` refuses before it creates anything when it runs workers here, and ``search worker``
    before it claims a trial. Checked on the middle of the search space (as ``lr-find`` does); a
    study whose precision depends on its parameters is still failed trial by trial, and errors of
    the study's own code are left to its trials to report.

    Raises:
        SearchError: the study trains in fp16 and this machine would train it on CPU.
    """
    import optuna
    import torch

    from search.settings import middle_params
    from studies import study_infra

    try:
        params = study.suggest(optuna.trial.FixedTrial(middle_params(study)))
        config = study.train_config(params, study.search_fidelity)
        on_cpu = study_infra(study, params, study.search_fidelity).cpu or not torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - the study's own errors are its trials' to report
        return
    if config.mixed_precision == "fp16" and on_cpu:
        raise SearchError(
            f"study {study.name!r} trains in fp16, which needs a CUDA GPU, and this machine has none; train it "
            "on GPU nodes (`search start --workers 0` here, `search worker` there) or in bf16 or full precision "
            "(built-in studies: --study-option precision=bf16)"
        )


def connect(loc: Locations, study_name: str, worker_id: str, coordinator: Coordinator | None = None,
            early: bool = False) -> WorkerContext:  # fmt: skip
    """Open the study and MLflow, load the data: everything a worker does once.

    Pass the ``coordinator`` that found the study, if any: a second one would keep its own pool of
    connections open for the worker's life. An ``early`` worker (released by ``search start`` as
    soon as its new study exists) may join before the study's MLflow parent run does: its trials'
    runs wait for it (:class:`ParentRun`); any other worker needs it there.
    """
    coordinator = coordinator or Coordinator(loc.storage_url, study_name)
    ordinal = coordinator.join()

    def load() -> tuple[optuna.Study, StudyRecord, dict[str, Any]]:
        loaded = coordinator.load(worker_ordinal=ordinal)
        return loaded, coordinator.read_record(), loaded.user_attrs

    # A worker that starts as the server restarts rides it out here too, as in its trials.
    optuna_study, record, attrs = retrying(load, "loading the study")
    if PARENT_RUN_ATTR not in attrs and not early:
        raise SearchError(f"study {study_name!r} has no MLflow parent run; start it with `search start`")
    loaded = preloaded(record.study_ref, record.options, record.narrow)  # an early worker loaded them already
    if loaded is not None:
        log.info("using the study and data loaded while the study was being created")
        study, data = loaded  # `search start` has checked that it trains here
    else:
        study = load_study(record.study_ref, record.options, record.narrow)
        check_trains_here(study)  # before the data: a worker that cannot train leaves at once
        data = study.load_data()
    # torch imports torch._dynamo on the first optimizer it builds (1-2 s): pay that here, once,
    # instead of inside the first trial.
    import torch._dynamo  # noqa: F401

    cap_gpu_memory()
    fidelity = study.search_fidelity
    tracker = Tracker(loc.tracking())
    # Start-up leaves millions of long-lived objects (torch, the data); without this the collector's
    # next full pass walks them all, ~0.2 s in the middle of some trial, and again later. (An early
    # worker collected while it waited, or had no time to wait: then freezing is enough.) MLflow
    # is not imported here: the first trial is claimed and trains meanwhile, its run created on the
    # tracker's writer thread once MLflow is there (Tracker.open_child).
    if not early:
        gc.collect()
    gc.freeze()
    parent = ParentRun(attrs, lambda: retrying(coordinator.study_user_attrs, "reading the study's parent run"))
    # A paused trial resumes from its checkpoint: only where that is (a shared root: any worker).
    coordinator.can_resume = lambda number: (study_dir(loc.checkpoint_root, study_name) / f"trial-{number}").is_dir()
    return WorkerContext(
        study=study, data=data, search_train=search_subset(data.train, fidelity.data_fraction, record.settings.seed),
        search_folds=tuple(search_subset(f.train, fidelity.data_fraction, record.settings.seed) for f in data.folds),
        record=record, coordinator=coordinator, optuna_study=optuna_study, tracker=tracker,
        parent=parent,
        checkpoint_root=loc.checkpoint_root, worker_id=worker_id, tensorboard_dir=loc.tensorboard_dir,
    )  # fmt: skip


def run_worker(ctx: WorkerContext, stop: Any = None) -> WorkerReport:
    """Claim and run trials until none is left; ``stop()`` returning True ends the loop early."""
    report = WorkerReport(ctx.worker_id)
    while stop is None or not stop():
        claimed_at, ctx.cpu_at_claim = time.perf_counter(), time.process_time()
        trial, counts = ctx.coordinator.claim(ctx.optuna_study, ctx.pruner_trials, ctx.record.search_epochs)
        if trial is None:
            # Linger while others run: if one of them dies, its retry must find a live worker.
            if counts.state("RUNNING") == 0:
                discard_paused(ctx)
                break
            idle_wait(IDLE_POLL_S)  # less if a sibling found the study over
            continue
        outcome = run_trial(ctx, trial, claimed_at)
        report.outcomes.append(outcome)
        log.info("trial %d %s%s", outcome.number, outcome.state, f" ({outcome.reason})" if outcome.reason else "")
        if outcome.state == "PAUSED":  # freeze-thaw: keep the paused trials' checkpoints within their bound
            bound_paused_disk(ctx)
    return report


def cap_gpu_memory() -> float | None:
    """Cap this worker's share of its GPU's memory as its starter said (``ENV_GPU_MEMORY_FRACTION``:
    it shares the GPU with other workers, ``--workers-per-gpu``); the cap, or None.

    Past the cap PyTorch's allocator frees its cache and tries again, then raises
    ``torch.OutOfMemoryError``: that trial fails, as on a GPU of that size, and the workers beside
    it keep their share. The cap counts PyTorch's allocations, not the CUDA context.
    """
    value = os.environ.get(ENV_GPU_MEMORY_FRACTION)
    try:
        fraction = float(value) if value else 1.0
    except ValueError:
        log.warning("ignoring %s=%r: not a fraction", ENV_GPU_MEMORY_FRACTION, value)
        return None
    if not 0 < fraction < 1:
        return None
    import torch

    if not torch.cuda.is_available():  # trained on CPU (the study asks for it, or the GPU is gone)
        return None
    for device in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    log.info("this worker may allocate %.0f%% of its GPU's memory (shared with other workers)", 100 * fraction)
    return fraction


def default_worker_id(index: int) -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{index}"


def interrupt_running(ctx: WorkerContext) -> None:
    """On Ctrl-C/SIGTERM: fail this worker's running trials and queue their retries (resumed later).

    Each is failed and its retry queued in one step under the study lock, as a reaper does: a claim
    between the two would find the logical trial finished (FAIL, no retry) and could end the search
    a trial short; and the retry is made from the trial as it ran, so it carries no ``fail_reason``.
    Interrupts after the first are ignored from the moment it lands (``search.cli``), so none can
    cut this short and leave a trial RUNNING. A trial claimed just now may not name its worker yet:
    it is found as the one its claim noted (``Coordinator.claimed``: Ctrl-C waits for that note).
    """
    from optuna.trial import TrialState

    import storage as st

    running = ctx.optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    claimed = ctx.coordinator.claimed
    mine = [t for t in running if t.user_attrs.get("worker") == ctx.worker_id or st.trial_id(t) == claimed]
    if not mine:
        return
    failed = []
    with ctx.coordinator.lock() as conn:
        for trial in mine:
            st.check_lock(conn)
            # None: a reaper (or its own tell) finished it first, and nothing is left to resume.
            if fail_and_retry(ctx.coordinator.storage, ctx.optuna_study, st.trial_id(trial), INTERRUPTED) is not None:
                failed.append(trial)
    for trial in failed:
        run_id = trial.user_attrs.get("mlflow_run_id")
        if run_id:
            ctx.tracker.mark_killed(run_id)
