"""The ``search`` click group: global flags and logging. Imports here stay light so ``--help`` answers at once."""

from __future__ import annotations

import logging
import os
import sys

import click

from search import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="search")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Hyperparameter search for PyTorch: Optuna studies, Accelerate training, MLflow tracking.

    \b
    search start --study resmlp --trials 200      run a whole search on this machine
    search worker --study resmlp --storage URL     add a worker from another node
    search status --study resmlp                   where a study stands
    """
    ctx.obj = {"debug": debug}
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("alembic", "mlflow", "optuna", "urllib3", "httpx", "git", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if debug else logging.ERROR)
    if not debug:
        quiet_library_warnings()


def quiet_library_warnings() -> None:
    """Optuna's 'experimental' notices and MLflow's pip-requirement hints are not for our users."""
    import warnings

    warnings.filterwarnings("ignore", message=".*is experimental.*")
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage is supposed to be used.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
