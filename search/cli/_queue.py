"""``search enqueue``: configurations to try first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import find_study_options, location_options, option


@cli.command()
@find_study_options
@option(
    "--params",
    "params",
    multiple=True,
    metavar="NAME=VALUE[,NAME=VALUE...]",
    help="One configuration (repeatable: one each); parameters left out are the sampler's to choose.",
)
@option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSON list of configurations, or a CSV file with a parameter per column.",
)
@location_options
def enqueue(**kwargs: Any) -> None:
    """Queue configurations you know to try first: workers take them before asking the sampler.

    They are trials of the budget (refused when more than it has left) and inform the sampler like
    any other once they finish.
    """
    from search.api._enqueue import enqueue as queue
    from search.api._enqueue import read_configurations
    from search.api._open import open_existing
    from search.settings import parse_options

    params, path = kwargs.pop("params"), kwargs.pop("path")
    configs = [parse_options(tuple(p.split(","))) for p in params]
    if path is not None:
        configs += read_configurations(path)
    coordinator = open_existing(kwargs)
    numbers = queue(coordinator, configs)
    click.echo(f"queued {len(numbers)} configuration{'s' * (len(numbers) != 1)} in study "
               f"{coordinator.study_name!r} as trial{'s' * (len(numbers) != 1)} {', '.join(map(str, numbers))}; "
               "workers take them first")  # fmt: skip
