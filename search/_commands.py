"""Subcommands of ``search``. Each reads like: resolve, run, report."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from search.cli import cli, location_options

study_name_option = click.option("--name", help="Optuna study name [the study's own name].")


def _outage_option(func: Any) -> Any:
    return click.option(
        "--db-outage-limit", type=float, default=120, show_default=True, envvar="SEARCH_DB_OUTAGE_LIMIT",
        show_envvar=True, metavar="SECONDS",
        help="How long workers ride out a lost database (retrying with backoff) before they exit with an error.",
    )(func)  # fmt: skip


def _study_options(func: Any) -> Any:
    return click.option(
        "--study-option", "study_option", multiple=True, metavar="KEY=VALUE",
        help="Option passed to the study's make_study, e.g. data=synthetic (repeatable).",
    )(func)  # fmt: skip


@cli.command()
@click.option("--study", required=True, help="Built-in study name (see `search studies`) or a path to a .py file.")
@click.option("--trials", type=int, required=True, help="Total budget of finished trials (complete+pruned+failed).")
@study_name_option
@click.option(
    "--workers",
    type=int,
    help="Local worker processes [one per GPU, else one per two CPU cores]; "
    "0 creates the study and follows it without training.",
)
@click.option("--sampler", default="tpe", show_default=True, help="tpe | random | qmc | cmaes[:startup=N].")
@click.option(
    "--pruner",
    default="hyperband",
    show_default=True,
    help="hyperband | median | successive-halving | none, with options like median:startup=2,warmup=1.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampler and data-split seed.")
@click.option(
    "--max-retries", type=int, default=2, show_default=True, help="How often a trial whose worker died is retried."
)
@click.option("--heartbeat-interval", type=int, default=10, show_default=True, help="Seconds between heartbeats.")
@click.option(
    "--grace-period",
    type=int,
    default=60,
    show_default=True,
    help="Seconds without a heartbeat before a trial counts as dead.",
)
@click.option("--gpus", help="GPUs for local workers: all | 0,1,... [all visible].")
@click.option("--no-retrain", is_flag=True, help="Skip retraining and registering the best trial.")
@click.option("--quiet", "-q", is_flag=True, help="Only the final summary.")
@_study_options
@_outage_option
@location_options
@click.pass_context
def start(ctx: click.Context, **kwargs: Any) -> None:
    """Create (or resume) a study, run workers until the budget is spent, retrain and register the best."""
    from search._resilience import set_outage_limit
    from search._run import run_start

    set_outage_limit(kwargs.pop("db_outage_limit"))
    code = run_start(kwargs, debug=ctx.obj["debug"])
    sys.exit(code)


@cli.command()
@click.option("--study", help="Built-in study name or .py file (only used to find the study's name).")
@study_name_option
@click.option("--gpus", help="all | 0,1,...: one trial per GPU at a time, each in its own process.")
@click.option(
    "--gpus-per-trial",
    type=int,
    default=1,
    show_default=True,
    help="Run each trial as a torch.distributed job over this many GPUs (from --gpus).",
)
@click.option(
    "--procs-per-trial",
    type=int,
    default=1,
    show_default=True,
    help="Run each trial as a torch.distributed job of this many CPU processes (gloo).",
)
@click.option("--worker-index", type=int, default=0, hidden=True)
@click.option("--rank-of-group", is_flag=True, hidden=True)
@_outage_option
@location_options
@click.pass_context
def worker(ctx: click.Context, **kwargs: Any) -> None:
    """Join a running study from any machine and train until its budget is spent."""
    from search._resilience import set_outage_limit
    from search._run import run_worker_command

    set_outage_limit(kwargs.pop("db_outage_limit"))
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    sys.exit(run_worker_command(kwargs, debug=ctx.obj["debug"]))


def _interrupt_once(*_: Any) -> None:
    """Stop on the first Ctrl-C or SIGTERM and ignore the ones after it.

    A terminal's Ctrl-C reaches the whole process group and `search start` forwards another a few
    milliseconds later: the second must not cut short the clean-up the first started (failing the
    running trial so that it resumes), wherever it lands.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


@cli.command()
def studies() -> None:
    """List the built-in studies."""
    import studies as st

    for name, description in st.list_studies().items():
        click.echo(f"{name:10s} {description}")


@cli.command()
@click.option("--study", help="Built-in study name or .py file.")
@study_name_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@location_options
def status(**kwargs: Any) -> None:
    """Where a study stands: counts, running trials, best value (any storage, any machine)."""
    from search._progress import snapshot
    from search._run import open_existing

    as_json = kwargs.pop("as_json")
    snap = snapshot(open_existing(kwargs))
    click.echo(snap.to_json() if as_json else "\n".join(snap.lines()))


@cli.command()
@click.option("--study", help="Built-in study name or .py file.")
@study_name_option
@click.option("--trial", "trial_number", type=int, help="Retrain this trial instead of the best one.")
@location_options
def retrain(**kwargs: Any) -> None:
    """Retrain the best (or a given) trial at full scale, test it once and register the model."""
    from search._retrain import retrain_and_register
    from search._run import open_existing_with_locations
    from search._summary import print_retrain

    trial_number = kwargs.pop("trial_number")
    coordinator, loc = open_existing_with_locations(kwargs)
    print_retrain(retrain_and_register(coordinator, loc, trial_number))


@cli.command("new-study")
@click.argument("name")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="File to write [./NAME.py].")
def new_study(name: str, output: Path | None) -> None:
    """Write a documented study file to start your own study from."""
    from search._errors import SearchError
    from studies.template import render_template

    if not name.isidentifier():
        raise SearchError(f"study name {name!r} must be a Python identifier (letters, digits, _)")
    path = output or Path(f"{name}.py")
    if path.exists():
        raise SearchError(f"{path} already exists; choose another -o")
    path.write_text(render_template(name))
    click.echo(f"wrote {path}; run it with: search start --study {path} --trials 20")
