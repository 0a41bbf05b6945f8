"""What ``search start`` was asked, checked before anything starts; then its workers start at once.

Imports here stay light (no SQLAlchemy, Optuna, torch or study module): the command starts its
workers from here, so that their own imports (seconds) run while it imports and checks the rest.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from search.exceptions import SearchError
from search.execution import (
    check_gpus_to_share,
    check_sharing,
    default_workers,
    memory_fraction,
    parse_gpus,
    spawn_early,
    start_at_once,
    visible_gpus,
)
from search.settings import (
    SearchSettings,
    check_objective_flags,
    check_study_name,
    is_grid,
    parse_epoch_budget,
    study_ref,
    validate,
)


@dataclass(frozen=True)
class StartOptions:
    """What ``search start`` was asked to do; ``settings`` is what the study stores for its workers."""

    study: str
    trials: int | None
    """The budget; None: a resumed study's stored one, or a new grid study's grid size."""
    name: str | None = None
    workers: int | None = None
    settings: SearchSettings = field(default_factory=SearchSettings)
    study_options: dict[str, Any] = field(default_factory=dict)
    retrain: bool = True
    quiet: bool = False
    gpus: str | None = None
    workers_per_gpu: int = 1
    """Local workers per GPU (``--workers-per-gpu``): the default worker count is the GPUs times it."""
    gpu_memory_fraction: float | None = None
    """Each local worker's cap on its GPU's memory (``--gpu-memory-fraction``; 1: none); None: 0.9/n
    for the n workers on a GPU, when it has several."""
    narrow: dict[str, list[float]] = field(default_factory=dict)
    """Numeric parameters to search in a narrower range than the study declares (``--narrow``)."""
    timeout: float | None = None
    """Seconds after which this run starts no new trial (``--timeout``); not stored with the study."""
    stop_at: float | None = None
    """A best value at which this run starts no new trial (``--stop-at``); not stored with the study."""
    epoch_budget: str | None = None
    """``--epoch-budget`` as given (``800`` epochs, or ``40x`` trials' search epochs): this run starts no new
    trial once the study's trials have trained that many epochs; not stored with the study."""
    enqueue: tuple[dict[str, Any], ...] = ()
    """Configurations to try first (``--enqueue FILE``), queued as the study is created or resumed."""
    grid: dict[str, list[Any]] = field(default_factory=dict)
    """With ``--sampler grid``: values of parameters (``--grid``); the others take their declared choices."""
    warm_start_from: str | None = None
    """``--warm-start-from``: an earlier study whose best configurations a new study runs first."""
    warm_start_top: int = 5
    """``--warm-start-top``: how many of them."""
    objectives: tuple[str, ...] = ()
    """``--objective METRIC:min|max`` texts, in order; none: the study's own metric (or a resumed study's)."""
    constraints: tuple[str, ...] = ()
    """``--constraint`` texts (``latency_ms<=2``); none: a resumed study keeps its own."""
    explicit: frozenset[str] | None = None
    """The settings (and ``study_options``) the user gave; the rest keep a resumed study's stored
    values. None: all of them (a caller in Python means every value it passes)."""


def check_flags(opts: StartOptions) -> None:
    """The checks that need neither the study nor its data: before any process is started."""
    settings = opts.settings
    if opts.name is not None:
        check_study_name(opts.name)
    if opts.trials is not None and opts.trials <= 0:
        raise SearchError(f"--trials must be a positive number of trials, got {opts.trials}")
    if opts.epoch_budget is not None:
        parse_epoch_budget(opts.epoch_budget)
    grid = is_grid(settings.sampler)
    if opts.grid and not grid and (opts.explicit is None or "sampler" in opts.explicit):
        raise SearchError("--grid gives a grid search's values: add --sampler grid")
    if grid and opts.enqueue:
        raise SearchError("--enqueue does not go with --sampler grid: the grid's points are the queued trials")
    if opts.workers is not None and opts.workers < 0:
        raise SearchError(f"--workers must be >= 0, got {opts.workers}")
    if settings.max_retries < 0:
        raise SearchError(f"--max-retries must be >= 0, got {settings.max_retries}")
    if settings.heartbeat_interval <= 0:
        raise SearchError(
            f"--heartbeat-interval must be a positive number of seconds, got {settings.heartbeat_interval}"
        )
    if settings.grace_period <= settings.heartbeat_interval:
        raise SearchError(f"--grace-period ({settings.grace_period} s) must be longer than --heartbeat-interval "
                          f"({settings.heartbeat_interval} s), or live trials would count as dead")  # fmt: skip
    if settings.stall_timeout < 0:
        raise SearchError(
            f"--stall-timeout must be a positive whole number of seconds or off, got {settings.stall_timeout}"
        )
    if settings.checkpoint_every < 0:
        raise SearchError(f"--checkpoint-every must be >= 0 seconds (0: every epoch), got {settings.checkpoint_every}")
    if settings.latency_batch < 1:
        raise SearchError(f"--latency-batch must be a positive number of rows, got {settings.latency_batch}")
    validate(settings.sampler, settings.pruner)
    check_objective_flags(opts.objectives, opts.constraints, settings.select, opts.stop_at)
    check_sharing(opts.workers_per_gpu, opts.gpu_memory_fraction)
    if opts.gpus is not None:
        parse_gpus(opts.gpus)  # before the study exists, so a typo creates nothing


@dataclass
class LocalWorkers:
    """The command's local worker processes, how many it runs, and the GPUs they share."""

    procs: list[subprocess.Popen[bytes]]
    """Those started so far (see ``start_at_once``), in index order."""
    count: int
    gpus: list[str]
    study: tuple[str, dict[str, Any]] | None = None
    """What they preload: the study's ``(ref, options)``."""
    fraction: float | None = None
    """``--gpu-memory-fraction``, for those started later."""


def start_workers(opts: StartOptions, debug: bool) -> LocalWorkers:
    """Start the command's local workers, before the study exists or its input is checked beyond
    the flags (:func:`check_flags`): ``--workers-per-gpu`` per GPU they may use (round-robin over
    them), else one per core (``--workers``); as many at once as leave the command a core
    (``start_at_once``), the rest once those have claimed. They import and load the study
    meanwhile, then join it or are sent away (``release_workers``)."""
    gpus = parse_gpus(opts.gpus) if opts.gpus is not None else visible_gpus()
    check_gpus_to_share(gpus, opts.workers_per_gpu, opts.gpu_memory_fraction)
    # --workers-per-gpu per GPU it may use (one by default: a small trial may leave a GPU idle).
    workers = (len(gpus) * opts.workers_per_gpu or default_workers(opts.trials)) if opts.workers is None \
        else opts.workers  # fmt: skip
    # A study file's name is known once it is imported: they are told it when they join.
    early_study = (study_ref(opts.study), opts.study_options)  # loaded with its data while they wait
    fraction = opts.gpu_memory_fraction
    procs = spawn_early(start_at_once(workers), gpus, debug, early_study, total=workers, fraction=fraction) \
        if workers > 0 else []  # fmt: skip
    if not opts.quiet:  # the first second says what the next ten do
        on = f" on GPUs {','.join(gpus)}{_sharing(workers, gpus, fraction)}" if gpus else ""
        what = f"starting {workers} local worker{'s' * (workers != 1)}{on}" if workers else "no local workers"
        print(f"{what}; checking the study {opts.study!r} and opening its storage meanwhile", flush=True)
    return LocalWorkers(procs, workers, gpus, early_study, fraction)


def _sharing(workers: int, gpus: list[str], fraction: float | None) -> str:
    """`` (3 per GPU, each allowed 30% of its memory)`` when workers share a GPU or are capped."""
    if workers <= len(gpus) and (fraction is None or fraction >= 1):
        return ""
    low, high = workers // len(gpus), -(-workers // len(gpus))
    caps = {memory_fraction(i, workers, gpus, fraction) for i in range(len(gpus))}  # one worker of each GPU
    shown = " or ".join(f"{cap:.0%}" for cap in sorted(cap for cap in caps if cap is not None))
    cap = "no cap on memory" if not shown else f"each allowed {shown}{' or all' * (None in caps)} of its memory"
    return f" ({low if low == high else f'{low}-{high}'} per GPU, {cap})"
