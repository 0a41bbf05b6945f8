"""``search start``: its flags, parsed once into :class:`search.api.StartOptions`, then the API's start flow."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import (
    gpu_sharing_options,
    location_options,
    option,
    outage_option,
    patience_option,
    stack,
    stall_timeout_option,
    study_name_option,
    study_options_option,
    tensorboard_option,
)
from search.settings import PRUNERS, SAMPLERS, SELECT_RULES, SearchSettings

_defaults = SearchSettings()

_settings_options = stack(
    option("--sampler", default=_defaults.sampler,
           help=f"{' | '.join(SAMPLERS)}, with options like tpe:startup=5; auto: with 1 to 4 local workers "
                "gp:until=100 (the Gaussian process for the first 100 trials, then tpe), else tpe (a resumed study "
                "keeps its sampler); TPE's model reads at most 1000 finished trials, the best tenth and the latest "
                "(tpe:window=N; 0: all); grid runs each point of the declared space once (--grid) "
                "(docs/search-strategy.md)."),
    option("--pruner", default=_defaults.pruner,
           help=f"{' | '.join(PRUNERS)}, with options like median:startup=2,warmup=1; "
                "warmup=auto prunes from the first epoch that ranks the study's complete trials."),
    option("--seed", type=int, default=_defaults.seed, help="Sampler and data-split seed."),
    option("--max-retries", type=int, default=_defaults.max_retries,
           help="How often a trial whose worker died is retried."),
    option("--heartbeat-interval", type=int, default=_defaults.heartbeat_interval,
           help="Seconds between heartbeats."),
    option("--grace-period", type=int, default=_defaults.grace_period,
           help="Seconds without a heartbeat before a trial counts as dead."),
    stall_timeout_option(_defaults.stall_timeout),
    option("--checkpoint-every", type=int, default=_defaults.checkpoint_every, metavar="SECONDS",
           help="Seconds of training a killed trial may lose (or one epoch, when epochs are longer): trials "
                "are checkpointed that often, not after every short epoch; 0 checkpoints every epoch."),
    patience_option(_defaults.patience),
    option("--latency-batch", type=int, default=_defaults.latency_batch, metavar="ROWS",
           help="The batch at which each complete trial's inference latency per sample is measured "
                "(latency_ms_batch; latency_ms is at batch 1)."),
    option("--select", type=click.Choice(SELECT_RULES, case_sensitive=False), default=_defaults.select,
           help="Which trial is the champion: first, the best first --objective among trials that meet every "
                "--constraint; knee, the Pareto front's trial nearest the best of every objective at once "
                "(docs/objectives.md)."),
)  # fmt: skip
"""The flags stored with a new study as its :class:`~search.settings.SearchSettings`."""


@cli.command()
@option("--study", required=True, help="Built-in study name (see `search studies`) or a path to a .py file.")
@option(
    "--trials",
    type=int,
    help="Total budget of finished trials (complete+pruned+failed); required except with "
    "--sampler grid [its grid's size] or on resuming [the stored budget].",
)
@study_name_option
@option("--workers", type=int, help="Local worker processes [--workers-per-gpu per GPU, else one single-threaded "
                                    "worker per usable CPU core, at most 16 and the trials]; 0 creates the study "
                                    "and follows it without training.")  # fmt: skip
@_settings_options
@option(
    "--gpus",
    help="GPUs for local workers: all | 0,1,... (indices into CUDA_VISIBLE_DEVICES when it is set) [all visible].",
)
@gpu_sharing_options
@option("--no-retrain", is_flag=True, help="Skip retraining and registering the best trial.")
@option(
    "--timeout",
    metavar="DURATION",
    callback=lambda _c, _p, v: None if v is None else _duration(v),
    help="Start no new trial after this long (90s, 30m, 2h, 1.5d); running trials finish. For this run only.",
)
@option(
    "--enqueue",
    "enqueue_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Configurations to try first: a JSON list of objects or a CSV file with a parameter per column.",
)
@option("--warm-start-from", metavar="STUDY",
        help="A new study runs the best configurations of STUDY (same storage) first, mapped onto its "
             "space: a parameter it lacks or a value it does not admit is left to the sampler.")  # fmt: skip
@option(
    "--warm-start-top",
    type=int,
    default=5,
    show_default=True,
    metavar="K",
    help="With --warm-start-from: how many of its best complete trials that meet its constraints.",
)
@option(
    "--stop-at",
    type=float,
    metavar="VALUE",
    help="Start no new trial once the best value reaches VALUE (or beats it); running trials finish.",
)
@option(
    "--epoch-budget",
    metavar="EPOCHS|Nx",
    help="Start no new trial once the study's trials have trained this many epochs in all (Nx: N times the "
    "study's search epochs, what N trials cost that all train to their last); running trials finish. What "
    "pruning and --patience save goes into more trials. For this run only; --trials may then be left out.",
)
@option("--grid", multiple=True, metavar="NAME=V1,V2,...",
        help="With --sampler grid: the values of a parameter (repeatable; needed for continuous ones). Categorical "
             "parameters take all their choices, integer ones their whole range when it has at most 32 values; "
             "each point runs once, in an order fixed by --seed.")  # fmt: skip
@option("--objective", "objectives", multiple=True, metavar="METRIC:min|max",
        help="What the search optimises: any final metric of a trial (val_loss, val_accuracy, ...; repeatable for "
             "several objectives and a Pareto front) [the study's own, val_loss:min]. Only the study's own "
             "metric is pruned on; other objectives search with --pruner none (docs/objectives.md).")  # fmt: skip
@option("--constraint", "constraints", multiple=True, metavar="METRIC<=BOUND|METRIC>=BOUND",
        help="A bound a trial's final metric must meet to count (repeatable), e.g. 'latency_ms<=2'; infeasible "
             "trials stay in the study, steer TPE, NSGA-II and GP away, and are never the champion.")  # fmt: skip
@study_options_option
@option("--narrow", multiple=True, metavar="NAME=LOW:HIGH",
        help="Search a numeric parameter in a narrower range than the study declares, e.g. lr=1e-4:3e-3 "
             "(repeatable; `search lr-find --apply` writes it to search.toml).")  # fmt: skip
@tensorboard_option
@outage_option
@location_options
@click.pass_context
def start(ctx: click.Context, **kwargs: Any) -> None:
    """Create (or resume) a study, run workers until the budget is spent, retrain and register the best.

    Resuming, flags you leave out keep the study's stored values; a flag that changes one either
    applies (budget, retries, heartbeats, stall timeout, sampler, pruner) with a line saying so, or is refused
    (seed, study options, search space).
    """
    from click.core import ParameterSource

    from search.api._options import StartOptions, check_flags, start_workers
    from search.api._signals import stop_on_signals
    from search.exceptions import SearchError
    from search.execution import release_workers
    from search.settings import parse_grid, parse_narrow, parse_options

    outage_limit = kwargs.pop("db_outage_limit")
    names = list(_defaults.__dataclass_fields__)
    settings = SearchSettings(**{name: kwargs.pop(name) for name in names})
    sources = {name: ctx.get_parameter_source(name) for name in [*names, "study_option", "narrow", "grid"]}
    given = {name + "s" if name == "study_option" else name for name, source in sources.items()
             if source != ParameterSource.DEFAULT}  # fmt: skip
    try:
        narrow = parse_narrow(kwargs.pop("narrow"))
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    grid = parse_grid(kwargs.pop("grid"))
    from search.api._enqueue import read_configurations

    known = kwargs.pop("enqueue_file")
    opts = StartOptions(
        enqueue=tuple(read_configurations(known)) if known is not None else (),
        study=kwargs.pop("study"), trials=kwargs.pop("trials"), name=kwargs.pop("name"),
        workers=kwargs.pop("workers"), settings=settings, study_options=parse_options(kwargs.pop("study_option")),
        retrain=not kwargs.pop("no_retrain"), quiet=ctx.obj["quiet"], gpus=kwargs.pop("gpus"),
        workers_per_gpu=kwargs.pop("workers_per_gpu"), gpu_memory_fraction=kwargs.pop("gpu_memory_fraction"),
        narrow=narrow, grid=grid, explicit=frozenset(given), timeout=kwargs.pop("timeout"),
        stop_at=kwargs.pop("stop_at"), epoch_budget=kwargs.pop("epoch_budget"),
        objectives=tuple(kwargs.pop("objectives")),
        constraints=tuple(kwargs.pop("constraints")), warm_start_from=kwargs.pop("warm_start_from"),
        warm_start_top=kwargs.pop("warm_start_top"),
    )  # fmt: skip
    check_flags(opts)
    stop_on_signals()  # SIGTERM and SIGHUP stop the workers started below as Ctrl-C does
    # The workers start now, before this command imports SQLAlchemy, Optuna and the study (about
    # 0.4 s here), which their own imports overlap; they learn where the study lives when they join.
    local = start_workers(opts, debug=ctx.obj["debug"])
    try:
        from search.api._start import run_start
        from search.coordination import set_outage_limit

        set_outage_limit(outage_limit)  # the workers get it when they join
    except BaseException:
        release_workers(local.procs, go=None)
        raise
    sys.exit(run_start(opts, kwargs, debug=ctx.obj["debug"], local=local))


def _duration(value: str) -> float:
    from search.settings import parse_duration

    return parse_duration(value)
