"""The ``search`` click group and its global flags. Imports stay light so ``--help`` answers at once."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any, cast

import click

from search import __version__

GLOBAL_FLAGS = ("debug", "quiet")
"""Flags of the group that every subcommand accepts too: ``search --debug start`` == ``search start --debug``."""


class SearchGroup(click.Group):
    """A group whose global flags work before or after the subcommand's name."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.extend(_global_flags())
        super().add_command(cmd, name)


def _global_flags() -> list[click.Option]:
    return [
        click.Option(["--debug"], is_flag=True, expose_value=False, callback=_set_global,
                     help="Show tracebacks and debug logs (also before the subcommand)."),
        click.Option(["--quiet", "-q"], is_flag=True, expose_value=False, callback=_set_global,
                     help="Only warnings, errors and final results (also before the subcommand)."),
    ]  # fmt: skip


def _set_global(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """A global flag given after the subcommand (or from search.toml) counts as if given before it."""
    obj = ctx.find_root().ensure_object(dict)
    if value and not obj.get(str(param.name)):
        obj[str(param.name)] = True
        configure_output(debug=bool(obj.get("debug")), quiet=bool(obj.get("quiet")))


@click.group(cls=SearchGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="search")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option("--quiet", "-q", is_flag=True, help="Only warnings, errors and final results.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Hyperparameter search for PyTorch: Optuna studies, Accelerate training, MLflow tracking.

    \b
    search start --study resmlp --trials 200      run a whole search on this machine
    search worker --study resmlp --storage URL     add a worker from another node
    search status --study resmlp                   where a study stands
    search trials --study resmlp --json            every trial, for scripts

    Every flag can also come from the environment (where --help names a variable) or from
    search.toml; the command line wins over the environment, which wins over search.toml.
    """
    ctx.obj = {"debug": debug, "quiet": quiet}
    configure_output(debug, quiet)


_QUIET_ENV = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_LOGGING_LEVEL": "ERROR"}
_ENV_SET: set[str] = set()
"""The variables of ``_QUIET_ENV`` this process set (not the user), so that ``--debug`` takes them back."""
_QUIETED: list[Any] = []
"""The warning filters :func:`configure_output` added, so that a later ``--debug`` takes them back."""


def configure_output(debug: bool, quiet: bool = False) -> None:
    """Logging to stderr: ours at INFO (DEBUG with --debug, WARNING with --quiet); third-party
    loggers and warnings only with --debug."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for noisy in ("alembic", "mlflow", "optuna", "urllib3", "httpx", "git", "matplotlib", "torch.onnx", "onnx_ir",
                  "onnxscript"):  # fmt: skip
        logging.getLogger(noisy).setLevel(logging.DEBUG if debug else logging.ERROR)
    filters = cast(list[Any], warnings.filters)  # a list at run time
    for entry in _QUIETED:
        if entry in filters:
            filters.remove(entry)
    _QUIETED.clear()
    if not debug:
        quiet_library_warnings()
    else:
        for name in _ENV_SET:
            os.environ.pop(name, None)


def quiet_library_warnings() -> None:
    """Optuna's 'experimental' notices and MLflow's pip-requirement hints are not for our users."""
    before = list(warnings.filters)
    warnings.filterwarnings("ignore", message=".*is experimental.*")
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage is supposed to be used.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    _QUIETED.extend(f for f in warnings.filters if f not in before)
    _ENV_SET.update(name for name in _QUIET_ENV if name not in os.environ)
    # MLflow sets its loggers' level from this variable when it is imported (later, and in every
    # worker process): its INFO and WARNING lines (a torch version's local label, "Created version
    # '1'") repeat what our own output says.
    for name, value in _QUIET_ENV.items():
        os.environ.setdefault(name, value)
