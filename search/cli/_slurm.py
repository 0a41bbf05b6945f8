"""``search slurm submit``: workers as a Slurm job array."""

from __future__ import annotations

from typing import Any

import click

from search.cli._group import cli
from search.cli._options import find_study_options, location_options, option


@cli.group()
def slurm() -> None:
    """Run a study's workers where Slurm schedules them (see docs/clusters.md)."""


@slurm.command()
@find_study_options
@option("--workers", type=int, required=True, help="Array tasks, one `search worker` each.")
@option("--gpus-per-worker", type=int, default=1, help="GPUs per task (--gres=gpu:N); 0 for CPU workers.")
@option(
    "--workers-per-gpu",
    type=int,
    default=1,
    metavar="K",
    help="Trials at a time on each of a task's GPUs, each in its own process (share --cpus-per-worker).",
)
@option("--cpus-per-worker", type=int, default=4, help="CPUs per task.")
@option("--time", default="24:00:00", help="Time limit per task; a task stopped by it requeues itself.")
@option("--partition", help="Slurm partition.")
@option("--grace", type=int, default=180, help="Seconds before the time limit the worker is told to stop.")
@option("--sbatch", "extra", multiple=True, metavar="OPTION", help="Another #SBATCH option, e.g. --account=ml.")
@option("--dry-run", is_flag=True, help="Print the batch script; submit nothing.")
@location_options
def submit(**kwargs: Any) -> None:
    """Write the batch script and submit it: N workers that train until the budget is spent."""
    from search.api._open import locations, study_name
    from search.execution import SlurmArray, submit_array

    dry_run = kwargs.pop("dry_run")
    array = SlurmArray(
        study=study_name(kwargs), workers=kwargs.pop("workers"), gpus_per_worker=kwargs.pop("gpus_per_worker"),
        workers_per_gpu=kwargs.pop("workers_per_gpu"), cpus_per_worker=kwargs.pop("cpus_per_worker"),
        time=kwargs.pop("time"), partition=kwargs.pop("partition"), grace=kwargs.pop("grace"),
        extra=tuple(kwargs.pop("extra")),
    )  # fmt: skip
    loc = locations(kwargs, create=False)
    script = loc.project_dir / "slurm" / f"{array.study}-workers.sbatch"
    if dry_run:
        click.echo(array.script(loc.project_dir / "logs" / "slurm"), nl=False)
        return
    job = submit_array(array, loc, script)
    click.echo(f"submitted job {job}: {array.workers} workers for study {array.study!r} ({script})")
    click.echo(f"  logs: {loc.project_dir / 'logs' / 'slurm'}/{array.study}-{job}_<task>.log; "
               f"cancel with scancel {job}")  # fmt: skip
