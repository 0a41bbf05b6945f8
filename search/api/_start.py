"""``search start``: create or resume a study, run local workers, follow them, retrain the best.

Resuming, settings the user did not give keep the values stored with the study (:mod:`search.api._resume`).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import storage
from search.api._enqueue import check_configuration, enqueue
from search.api._follow import NOBODY_S, Stopping, follow_until_done
from search.api._objectives import with_folds, with_objectives
from search.api._open import check_reachable, locations
from search.api._options import LocalWorkers, StartOptions, check_flags, start_workers
from search.api._output import final_summary, watch_hints
from search.api._resume import resume_options, start_name
from search.api._signals import interrupted_exit_code
from search.api._warm_start import warm_start
from search.coordination import Coordinator, EarlyStop, study_finished
from search.exceptions import SearchError, WorkerFaultError
from search.execution import (
    Restarts,
    check_some_worker_succeeded,
    check_trains_here,
    reaping,
    release_workers,
    report_worker_codes,
    spawn_worker,
    start_rest,
    wait_for_workers,
)
from search.observation import make_follower, print_start_header
from search.settings import (
    StudyRecord,
    describe_grid,
    grid_points,
    grid_size,
    is_grid,
    load_study,
    parse_epoch_budget,
    parse_pruner,
    record_space,
    remove_study_dir,
    resolve_grid,
    study_ref,
    validate,
    with_resolved_sampler,
)
from search.tracking import open_parent_run

if TYPE_CHECKING:
    from search.settings import Locations
    from studies import Study

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedStudy:
    study: Study
    record: StudyRecord
    name: str
    budget: int
    enqueue: tuple[dict[str, Any], ...] = ()
    """Known configurations, checked against the space, to queue as the study is created or resumed."""
    points: tuple[dict[str, Any], ...] = ()
    """A grid search's points in the order they run; those not in the study yet are queued up to the budget."""
    chose: str = ""
    """The line saying which sampler ``--sampler auto`` chose for a new study, and why."""


def prepare(opts: StartOptions, workers: int | None = None) -> PreparedStudy:
    """Validate everything that can be validated before anything is created; ``--sampler auto`` is
    resolved for ``workers`` local workers (None: not known here)."""
    check_flags(opts)
    settings = opts.settings
    ref = study_ref(opts.study)
    study = load_study(ref, opts.study_options, opts.narrow)
    validate(settings.sampler, settings.pruner, study.search_fidelity.epochs)
    # A bad data file must fail here, in one line, not in every worker after the study exists.
    from studies import DataError

    try:
        data = study.load_data()
    except DataError:
        raise  # the study's own words, already one line
    except Exception as exc:  # noqa: BLE001 - the study's code: any error of its is bad input here
        first = (str(exc).strip().splitlines() or [""])[0]
        raise SearchError(
            f"study {study.name!r}: load_data failed: {type(exc).__name__}: {first}".rstrip(": ")
        ) from exc
    record = StudyRecord(
        study_ref=ref, metric=study.metric, direction=study.direction, search_epochs=study.search_fidelity.epochs,
        settings=settings, options=opts.study_options, space=record_space(study), narrow=opts.narrow,
    )  # fmt: skip
    record = with_objectives(record, opts)  # its pruner: none, unless it prunes on the study's own curve
    record = with_folds(record, opts, len(getattr(data, "folds", ())))  # k-fold: wilcoxon, unless given
    if opts.epoch_budget is not None and record.folds:
        raise SearchError("--epoch-budget counts epochs, and a k-fold study's trials report folds: give --trials")
    parse_pruner(record.settings.pruner).check_study(study, record.space)  # e.g. pbt: the study's mutable parameters
    known = tuple(check_configuration(record.space, c, f"--enqueue configuration {i + 1}")
                  for i, c in enumerate(opts.enqueue))  # fmt: skip
    if is_grid(settings.sampler):
        return _prepare_grid(opts, study, record)
    if opts.grid:
        raise SearchError(f"--grid gives a grid search's values, and this study searches with {settings.sampler!r}: "
                          "add --sampler grid")  # fmt: skip
    trials = opts.trials
    if trials is None and opts.epoch_budget is not None:  # a bound: each trial trains an epoch at least
        trials = parse_epoch_budget(opts.epoch_budget, record.search_epochs)
    if trials is None:
        raise SearchError("--trials is required: the budget of trials (--sampler grid's default is its size, "
                          "--epoch-budget's its epochs)")  # fmt: skip
    if len(known) > trials:
        raise SearchError(f"--enqueue has {len(known)} configurations, more than --trials {trials}")
    record, chose = with_resolved_sampler(record, workers)
    return PreparedStudy(study, record, start_name(opts, study), trials, known, chose=chose)


def _prepare_grid(opts: StartOptions, study: Study, record: StudyRecord) -> PreparedStudy:
    """The grid resolved against the space and stored in the record; its first ``--trials`` points
    (all of them by default) in the seed's order, to queue. A larger budget is refused: every
    trial of a grid search is one of its points."""
    grid = resolve_grid(record.space, opts.grid)
    size = grid_size(grid)
    budget = size if opts.trials is None else opts.trials
    if budget > size:
        raise SearchError(f"--trials {budget} is more than the grid's {describe_grid(grid)}; give at most "
                          f"--trials {size}, or more --grid values")  # fmt: skip
    points = tuple(grid_points(grid, record.settings.seed))
    return PreparedStudy(study, replace(record, grid=grid), start_name(opts, study), budget, points=points)


def create_or_resume(loc: Locations, prepared: PreparedStudy, budget: int | None = None,
                     release: Callable[[str | None], None] | None = None) -> tuple[Coordinator, bool]:  # fmt: skip
    """The study plus its MLflow experiment and parent run; a new study is removed if any part fails.

    ``release(name)`` lets early workers join a new study before its parent run is made (MLflow's
    import and the run take seconds, which their first trials spend training; their runs are made
    once it exists); if making it fails, ``release(None)`` ends them before the study is removed.
    """
    coordinator = Coordinator(loc.storage_url, prepared.name)
    optuna_study, created = coordinator.create_or_resume(prepared.record, prepared.budget if budget is None else budget,
                                                         prepared.points)  # fmt: skip
    record, settings = prepared.record, prepared.record.settings
    summary = {"study": record.study_ref, "direction": record.direction, "metric": record.metric,
               "sampler": settings.sampler, "pruner": settings.pruner, "seed": settings.seed}  # fmt: skip
    early = release if created else None
    try:
        coordinator.remember_checkpoint_root(loc.checkpoint_root)
        if prepared.enqueue:  # before any worker joins: they take these first
            enqueue(coordinator, list(prepared.enqueue))
        if early is not None:
            early(coordinator.study_name)
        open_parent_run(optuna_study, loc, resumed=not created, summary=summary)
    except BaseException:
        if created:
            if early is not None:
                early(None)
                remove_study_dir(loc.checkpoint_root, coordinator.study_name)  # their trials'
            coordinator.delete()
        raise
    return coordinator, created


def run_start(opts: StartOptions, kwargs: dict[str, Any], debug: bool, local: LocalWorkers | None = None) -> int:
    """The whole search: prepare, create or resume, run workers and follow them, then the summary.

    ``local``: the workers the command started already (:func:`start_workers`, as soon as its flags
    were checked); they import torch (seconds) and load the study while the input is checked and the
    study created or updated, and join once it is there (a new study's MLflow parent run is made
    while their first trials train), or are ended if the command fails.
    """
    if local is None:
        check_flags(opts)  # before any process starts (prepare() checks them again, later)
        local = start_workers(opts, debug)
    procs, workers, gpus, fraction = local.procs, local.count, local.gpus, local.fraction
    try:
        loc = locations(kwargs, create=False)
        check_reachable(loc)
        opts, changes = resume_options(opts, loc)
        prepared, warm = warm_start(loc, prepare(opts, workers or None), opts.warm_start_from, opts.warm_start_top)
        if workers > 0:  # its trials train here: all of them would fail, and spend the budget
            check_trains_here(prepared.study)
        storage.ensure_project_dir(loc.project_dir)

        def release(go: str | None) -> None:
            release_workers(procs, go, loc)

        coordinator, created = create_or_resume(loc, prepared, release=release)
        stop = _early_stop(coordinator, opts, prepared, created)
        claimed = 0 if created else _claimed(coordinator.counts())
        finished = not created and study_finished(coordinator)
        if not created:  # a new study's were released before its parent run was made
            release(None if finished else coordinator.study_name)
    except BaseException:
        release_workers(procs, go=None)
        raise
    if finished and not opts.quiet:  # the same command again: say so and show what it found, train nothing
        larger = "--epoch-budget" if (stop.stopped or "").startswith("--epoch-budget") else "--trials"
        print(f"study {coordinator.study_name!r} is finished: nothing to run (`search retrain` trains its best "
              f"trial again; a larger {larger} searches on)", flush=True)  # fmt: skip
    if finished:
        _announce(changes, opts.quiet)  # stored all the same, for a larger budget later
        return final_summary(coordinator, loc, retrain=opts.retrain, quiet=opts.quiet, already_finished=True)
    # As a worker does: the imports and the study leave about 400,000 long-lived objects, which
    # every full pass of the collector would walk again (a few tenths of a second, often in the
    # study's last moments, when the summary reads every trial).
    gc.freeze()
    print_start_header(coordinator, loc, created, quiet=opts.quiet, chose=prepared.chose)
    if opts.enqueue and not opts.quiet:
        n = len(opts.enqueue)
        print(f"  queued {n} known configuration{'s' * (n != 1)} to run first (--enqueue)", flush=True)
    if warm and not opts.quiet:  # after --enqueue's, as they are queued; with what it left to the sampler
        print(f"  {warm}", flush=True)
    _announce(changes, opts.quiet)
    if len(procs) < workers:  # those left for later start once the first ones have claimed
        try:
            _await_claims(coordinator, procs, claimed)
            start_rest(procs, workers, gpus, debug, local.study, coordinator.study_name, loc, fraction)
        except BaseException:
            release_workers(procs, go=None)
            raise
    if stop.epoch_budget is not None and not opts.quiet:
        print(f"  epoch budget: no new trial once the trials have trained {stop.epoch_budget} epochs in all "
              "(--epoch-budget); running trials finish", flush=True)  # fmt: skip
    follower = Stopping(stop, make_follower(coordinator, opts.quiet, watch_hints(coordinator, loc)))
    follow = reaping(coordinator, loc, follower)  # the follower reaps dead trials (and ends their MLflow runs)
    try:
        if workers > 0:
            restarts = Restarts(lambda i: spawn_worker(loc, prepared.name, i, workers, gpus, debug, fraction),
                                live=lambda: not _budget_spent(coordinator),
                                finished=lambda pid, i: _finished_by(coordinator, pid, i))  # fmt: skip
            _run_local(coordinator, loc, procs, follow, follower, restarts)
        follow_until_done(coordinator, follower)
    except KeyboardInterrupt:
        follower.close()
        print("interrupted: running trials were stopped and will resume; run the same command again to resume")
        return interrupted_exit_code()
    follower.close()
    return final_summary(coordinator, loc, retrain=opts.retrain, quiet=opts.quiet)


def _run_local(coordinator: Coordinator, loc: Locations, procs: list[Any], follow: Callable[[], None],
               follower: Any, restarts: Restarts) -> None:  # fmt: skip
    """Wait for the local workers (replacing those that die of a fault while the study is live, see
    :class:`~search.execution.Restarts`). If all of them died of faults with the study unfinished,
    follow it while workers elsewhere train it; raise :class:`WorkerFaultError` once nobody does."""
    codes = wait_for_workers(procs, follow, restarts)
    # Bad input or an outage raises here: one line, without a warning per worker before it.
    fault = None if _budget_spent(coordinator) else check_some_worker_succeeded(codes, loc)
    report_worker_codes(codes, loc)
    if fault is None:
        return
    log.warning("%s; following the study while workers elsewhere train it", fault)
    if not follow_until_done(coordinator, follower, idle_limit=NOBODY_S):
        raise WorkerFaultError(f"{fault}; no worker trains the study (its trials are queued again: run the "
                               "same command to resume it)")  # fmt: skip


def _finished_by(coordinator: Coordinator, pid: int, index: int) -> bool:
    """Whether the local worker that ran as ``pid`` completed or pruned a trial (its id: default_worker_id)."""
    import socket

    from optuna.trial import TrialState

    worker = f"{socket.gethostname()}:{pid}:{index}"
    trials = coordinator.load().get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return any(t.user_attrs.get("worker") == worker for t in trials)


def _announce(changes: list[str], quiet: bool) -> None:
    for line in changes:  # never silent; with --quiet a warning on stderr
        (log.warning("changed %s", line) if quiet else print(f"  changed {line}", flush=True))


def _claimed(counts: storage.TrialCounts) -> int:
    return counts.total - counts.state("WAITING")


def _await_claims(coordinator: Coordinator, procs: list[Any], before: int, limit: float = 10.0) -> None:
    """Wait (at most ``limit`` s) until each worker in ``procs`` has claimed a trial since ``before``
    trials were claimed, one has exited, or the budget is all claimed: with no core to spare (see
    ``start_at_once``), a worker started now would take half of one from those first trials."""
    deadline, budget = time.monotonic() + limit, coordinator.budget()
    while time.monotonic() < deadline and all(proc.poll() is None for proc in procs):
        counts = coordinator.counts()
        if _claimed(counts) - before >= len(procs) or counts.started >= budget:
            return
        time.sleep(0.05)


def _early_stop(coordinator: Coordinator, opts: StartOptions, prepared: PreparedStudy, created: bool) -> EarlyStop:
    """``--timeout``, ``--stop-at``, ``--epoch-budget`` (counted at once: workers read it); one spent ends it now."""
    record = prepared.record
    epochs = None if opts.epoch_budget is None else parse_epoch_budget(opts.epoch_budget, record.search_epochs)
    stop = EarlyStop(coordinator, opts.timeout, opts.stop_at, maximize=record.maximize()[0],
                     constrained=bool(record.constraints), epoch_budget=epochs)  # fmt: skip
    if not created or epochs is not None:
        stop()
    return stop


def _budget_spent(coordinator: Coordinator) -> bool:
    return coordinator.counts().finished_logical >= coordinator.budget()
