"""Subcommands that show a study to people: ``follow``, ``dashboard``, ``report``, ``mlflow`` and ``serve``.

Each reads like the others in ``_commands``: resolve the study, do one thing, say where to look.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import find_study_options, host_option, location_options, option


def _announce(what: str, study: str) -> Any:
    def announce(url: str) -> None:
        click.echo(f"{what} for study {study!r}: {url}\n(Ctrl-C to stop)")

    return announce


@cli.command()
@find_study_options
@option("--interval", type=click.FloatRange(min=0.2), default=1.0, metavar="SECONDS", help="Seconds between reads.")
@location_options
def follow(**kwargs: Any) -> None:
    """Follow a running study from any terminal or machine: the live view `search start` shows
    (plain lines when the output is not a terminal), until the study finishes. Only reads the study;
    Ctrl-C stops following, not the study. With `--pruner asha`, when all that is left is a paused
    trial that has earned its resumption and no worker takes it (none is running), it says so and
    exits 1.
    """
    from search.api._follow import follow_view
    from search.api._open import open_existing_with_locations
    from search.api._output import watch_hints
    from search.observation import make_follower

    interval = kwargs.pop("interval")
    coordinator, loc = open_existing_with_locations(kwargs)
    follower = make_follower(coordinator, quiet=False, hints=watch_hints(coordinator, loc))
    try:
        stuck = follow_view(coordinator, follower, interval)
    except KeyboardInterrupt:
        follower.close()
        click.echo("stopped following; the study goes on")
        return
    follower.close()
    if stuck is not None:  # freeze-thaw, and no worker left to resume a trial: the study is not over
        click.echo(f"stopped following: {stuck}")
        sys.exit(1)
    counts = coordinator.counts()
    click.echo(f"study {coordinator.study_name!r} finished: {counts.finished_logical}/{coordinator.budget()} trials "
               f"(`search best --name {coordinator.study_name}` shows the best and the champion)")  # fmt: skip


@cli.command()
@find_study_options
@host_option
@option("--port", type=int, default=8080, help="Port to listen on (0: any free port).")
@location_options
@click.pass_context
def dashboard(ctx: click.Context, **kwargs: Any) -> None:
    """Serve optuna-dashboard on a study's storage: history, importances, every trial, live."""
    from search.api._open import open_existing
    from search.observation import serve_dashboard

    host, port = kwargs.pop("host"), kwargs.pop("port")
    coordinator = open_existing(kwargs)
    name = coordinator.study_name
    serve_dashboard(coordinator.url, name, host, port, _announce("optuna-dashboard", name), ctx.obj["debug"])


@cli.command()
@find_study_options
@option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write [./<study>-report.html].")  # fmt: skip
@option("--no-mlflow", is_flag=True, help="Do not attach the page to the study's MLflow parent run.")
@location_options
def report(**kwargs: Any) -> None:
    """Write one self-contained HTML page about a study and attach it to its MLflow parent run.

    It shows the champion (version, test metrics, exports), the optimization history, learning
    curves (pruned trials cut short), parallel coordinates, parameter importances, slice plots of
    the most important parameters, the epochs and training time pruning saved, failure reasons
    with counts, which worker ran which trial, and a sortable table of every trial. Past 1,000 trials
    the figures draw a sample of about 1,000 and the table lists the best 1,000, each saying so.
    """
    from search.api._open import open_existing_with_locations
    from search.observation import REPORT_ARTIFACT, write_report

    output, no_mlflow = kwargs.pop("output"), kwargs.pop("no_mlflow")
    coordinator, loc = open_existing_with_locations(kwargs)
    path = output or Path(f"{coordinator.study_name}-report.html")
    result = write_report(coordinator, loc, path, attach=not no_mlflow)
    click.echo(f"wrote {result.path} ({result.path.stat().st_size / 1e6:.1f} MB)")
    if result.mlflow_run_id:
        click.echo(f"attached as {REPORT_ARTIFACT} to MLflow run {result.mlflow_run_id}")


@cli.command("mlflow")
@find_study_options
@host_option
@option("--port", type=int, default=5000, help="Port to listen on.")
@location_options
def mlflow_ui(**kwargs: Any) -> None:
    """Serve the MLflow UI on a study's tracking store: one run per trial under the study's run.

    When the tracking URI is already an MLflow server, print the study's page there instead.
    """
    import storage
    from search.api._open import open_existing_with_locations
    from search.observation import check_port_free, experiment_path, serve_mlflow

    host, port = kwargs.pop("host"), kwargs.pop("port")
    coordinator, loc = open_existing_with_locations(kwargs)
    fragment = experiment_path(coordinator)
    announce = _announce("MLflow UI", coordinator.study_name)
    if storage.TrackingLocation(loc.tracking_uri, loc.artifact_location).is_server:
        click.echo(f"MLflow UI for study {coordinator.study_name!r}: "
                   f"{storage.mask(loc.tracking_uri.rstrip('/'))}{fragment}")  # fmt: skip
        return
    check_port_free(host, port)
    sys.exit(serve_mlflow(loc, fragment, host, port, announce))


@cli.command()
@find_study_options
@host_option
@option("--port", type=click.IntRange(1, 65535), default=5001, show_default=True, help="Port to listen on.")
@location_options
def serve(**kwargs: Any) -> None:
    """Serve the study's champion over HTTP with MLflow's model server, in the foreground.

    The registered version the champion alias points at when the command starts is served
    (``mlflow models serve --env-manager local``: in this Python environment, nothing installed).
    POST rows of raw features to /invocations as {"inputs": [[...], ...]}; /ping answers when it is
    up. Ctrl-C stops it. Its log is .search/logs/model-server.log (under --project-dir).
    """
    from search.api._open import open_existing_with_locations
    from search.api._results import champion_to_serve
    from search.observation import check_port_free, serve_model

    host, port = kwargs.pop("host"), kwargs.pop("port")
    coordinator, loc = open_existing_with_locations(kwargs)
    model_uri, example = champion_to_serve(coordinator, loc)
    check_port_free(host, port)

    def announce(url: str) -> None:
        click.echo(f"serving {model_uri} (champion of study {coordinator.study_name!r}) at {url}")
        body = example or '{"inputs": [[...raw feature values...]]}'
        click.echo(f"  curl {url}/invocations -H 'Content-Type: application/json' -d '{body}'")
        click.echo(f"  log: {loc.project_dir / 'logs' / 'model-server.log'}\n(Ctrl-C to stop)")

    sys.exit(serve_model(loc, model_uri, host, port, announce))
