"""What ``search start`` and ``search worker`` do, between parsing flags and printing results."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from search._errors import SearchError

if TYPE_CHECKING:
    from search._coordinator import Coordinator
    from search._settings import Locations

log = logging.getLogger(__name__)


def _locations(kwargs: dict[str, Any], create: bool) -> Locations:
    from search.cli import resolve

    return resolve(kwargs, create=create)


def _study_name(kwargs: dict[str, Any]) -> str:
    """``--name``, else the study's own name (``--study`` may be a built-in or a file)."""
    name = kwargs.pop("name", None)
    ref = kwargs.pop("study", None)
    if name:
        return str(name)
    if not ref:
        raise SearchError("give --name (or --study) to say which study")
    if not ref.endswith(".py"):
        return str(ref)
    from search._catalog import load_study, study_ref

    return str(load_study(study_ref(ref)).name)


def _check_reachable(loc: Locations) -> None:
    import storage

    if storage.is_postgres(loc.storage_url):
        storage.check_connection(loc.storage_url)


def open_existing_with_locations(kwargs: dict[str, Any]) -> tuple[Coordinator, Locations]:
    from search._coordinator import Coordinator

    name = _study_name(kwargs)
    loc = _locations(kwargs, create=False)
    import storage

    if loc.embedded and not storage.sqlite_path(loc.storage_url).exists():
        raise SearchError(f"no study {name!r} here: {loc.project_dir} has no embedded store (give --storage?)")
    _check_reachable(loc)
    coordinator = Coordinator.existing(loc.storage_url, name)  # raises StudyNotFoundError with a clear line
    return coordinator, loc


def open_existing(kwargs: dict[str, Any]) -> Coordinator:
    return open_existing_with_locations(kwargs)[0]


def run_start(kwargs: dict[str, Any], debug: bool) -> int:
    from search import _start
    from search._catalog import parse_options
    from search._reaper import reaping
    from search._summary import final_summary, print_start_header

    opts = _start.StartOptions(
        study=kwargs["study"], trials=kwargs["trials"], name=kwargs["name"], workers=kwargs["workers"],
        sampler=kwargs["sampler"], pruner=kwargs["pruner"], seed=kwargs["seed"],
        max_retries=kwargs["max_retries"], heartbeat_interval=kwargs["heartbeat_interval"],
        grace_period=kwargs["grace_period"], study_options=parse_options(kwargs["study_option"]),
        retrain=not kwargs["no_retrain"], quiet=kwargs["quiet"], gpus=kwargs["gpus"],
    )  # fmt: skip
    loc = _locations(kwargs, create=False)
    prepared = _start.prepare(opts)
    _check_reachable(loc)
    import storage

    storage.ensure_project_dir(loc.project_dir)
    coordinator, created = _start.create_or_resume(loc, prepared, opts.trials)
    print_start_header(coordinator, loc, created, quiet=opts.quiet)
    gpus = parse_gpus(opts.gpus) if opts.gpus is not None else _start.visible_gpus()
    # One worker per GPU it may use: more would put several trials on one GPU.
    workers = (len(gpus) or _start.default_workers()) if opts.workers is None else opts.workers
    follower = _make_follower(coordinator, opts.quiet)
    follow = reaping(coordinator, loc, follower)  # the follower reaps dead trials (and ends their MLflow runs)
    try:
        if workers > 0:
            procs = _start.spawn_workers(loc, prepared.name, workers, gpus, debug)
            codes = _start.wait_for_workers(procs, follow)
            if not _budget_spent(coordinator):
                _start.check_some_worker_succeeded(codes, loc)
            _report_worker_codes(codes, loc)
        follow_until_done(coordinator, follower)
    except KeyboardInterrupt:
        follower.close()
        print("interrupted: running trials were stopped and will resume; run the same command again to resume")
        return 130
    follower.close()
    return final_summary(coordinator, loc, retrain=opts.retrain, quiet=opts.quiet)


def _make_follower(coordinator: Coordinator, quiet: bool) -> Any:
    from search._progress import make_follower

    return make_follower(coordinator, quiet)


def follow_until_done(coordinator: Coordinator, follower: Any, poll: float = 2.0) -> None:
    """Follow the study (reaping dead trials) until every logical trial of the budget has finished."""
    study = coordinator.load()
    while True:
        coordinator.reap(study)
        counts = coordinator.counts()
        follower()
        if counts.finished_logical >= coordinator.budget() and counts.state("RUNNING") == 0 \
                and counts.state("WAITING") == 0:  # fmt: skip
            return
        time.sleep(poll)


def _budget_spent(coordinator: Coordinator) -> bool:
    return coordinator.counts().finished_logical >= coordinator.budget()


def _report_worker_codes(codes: list[int], loc: Locations) -> None:
    for index, code in enumerate(codes):
        if code not in (0, None):
            log.warning(
                "worker %d exited with code %s; see %s", index, code, loc.project_dir / "logs" / f"worker-{index}.log"
            )


def parse_gpus(value: str) -> list[str]:
    """``all`` or a list of distinct GPU indices, each of which must exist on this machine."""
    from search._start import visible_gpus

    if value.strip().lower() == "all":
        gpus = visible_gpus()
        if not gpus:
            raise SearchError("--gpus all: no NVIDIA GPU is visible on this machine")
        return gpus
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise SearchError(f"invalid --gpus value {value!r}; expected all or a comma-separated list like 0,1")
    present = visible_gpus()
    missing = [p for p in parts if p not in present]
    if missing:
        have = ", ".join(present) if present else "none"
        raise SearchError(f"--gpus {value}: no GPU {', '.join(missing)} on this machine (GPUs here: {have})")
    return parts


def run_worker_command(kwargs: dict[str, Any], debug: bool) -> int:
    """``search worker``: one process per GPU slot, a process group per multi-process trial, or this process."""
    from search._worker import connect, default_worker_id, run_worker

    gpus_flag, index = kwargs.pop("gpus"), kwargs.pop("worker_index")
    gpus_per_trial, procs_per_trial = kwargs.pop("gpus_per_trial"), kwargs.pop("procs_per_trial")
    if kwargs.pop("rank_of_group"):
        return _run_rank(kwargs, index)
    if gpus_per_trial < 1 or procs_per_trial < 1:
        raise SearchError("--gpus-per-trial and --procs-per-trial must be >= 1")
    gpus = parse_gpus(gpus_flag) if gpus_flag is not None else None
    if gpus_per_trial > 1 and not gpus:
        gpus = parse_gpus("all")
    coordinator, loc = open_existing_with_locations(kwargs)
    release = coordinator.storage.engine.dispose  # for branches whose processes connect on their own
    if gpus_per_trial > 1 or procs_per_trial > 1:
        release()
        return _run_groups(loc, coordinator.study_name, gpus if gpus_per_trial > 1 else None,
                           max(gpus_per_trial, procs_per_trial), index, debug)  # fmt: skip
    if gpus and len(gpus) > 1:
        from search._start import spawn_workers, wait_for_workers

        release()
        procs = spawn_workers(loc, coordinator.study_name, len(gpus), gpus, debug)
        codes = wait_for_workers(procs, lambda: None)
        return max((c or 0) for c in codes)
    if gpus:
        import os

        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
    ctx = connect(loc, coordinator.study_name, default_worker_id(index), coordinator)
    try:
        report = run_worker(ctx)
    except KeyboardInterrupt:
        _interrupt_running(ctx)
        return 130
    log.info("worker %s done: %d trials", ctx.worker_id, len(report.outcomes))
    return 0


def _run_groups(loc: Locations, name: str, gpus: list[str] | None, size: int, index: int, debug: bool) -> int:
    """One process group per ``size`` GPUs (or one CPU group), each running trials until the study is done."""
    from concurrent.futures import ThreadPoolExecutor

    from search._gang import launch

    if gpus is not None and len(gpus) < size:
        raise SearchError(f"--gpus-per-trial {size} needs at least {size} GPUs, {len(gpus)} given")
    groups = [gpus[i : i + size] for i in range(0, len(gpus) - size + 1, size)] if gpus else [[]]
    with ThreadPoolExecutor(len(groups)) as pool:
        codes = list(pool.map(lambda g: launch(loc, name, size, g[1], index * 100 + g[0], debug), enumerate(groups)))
    return max(codes)


def _run_rank(kwargs: dict[str, Any], index: int) -> int:
    """One rank of a multi-process trial group; only rank 0 opens the study."""
    import os

    from search._gang import run_rank

    name = _study_name(kwargs)
    loc = _locations(kwargs, create=False)
    return run_rank(loc, name, index, os.environ["HPSEARCH_GANG_WORKER_ID"])


def _interrupt_running(ctx: Any) -> None:
    """On Ctrl-C/SIGTERM: fail this worker's running trials and queue their retries (resumed later).

    Interrupts after the first are ignored from the moment it lands (``search._commands``), so
    none can cut this short and leave a trial RUNNING.
    """
    from optuna.trial import TrialState

    callback = ctx.coordinator.storage.heartbeat_stale_trial_callback
    for trial in ctx.optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.user_attrs.get("worker") != ctx.worker_id:
            continue
        ctx.coordinator.storage.set_trial_user_attr(trial._trial_id, "fail_reason", "interrupted")
        if ctx.coordinator.storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
            run_id = trial.user_attrs.get("mlflow_run_id")
            if run_id:
                ctx.tracker.mark_killed(run_id)
            if callback is not None:
                callback(ctx.optuna_study, ctx.coordinator.storage.get_trial(trial._trial_id))
