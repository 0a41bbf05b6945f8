"""Click options that several commands share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def stack(*decorators: Decorator) -> Decorator:
    """Apply ``decorators`` as if written one above the other, first on top (first in ``--help``)."""

    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def option(*names: str, **kwargs: Any) -> Decorator:
    """``click.option`` that shows its default in ``--help`` (unless the default is None)."""
    kwargs.setdefault("show_default", kwargs.get("default") is not None and not kwargs.get("is_flag"))
    return click.option(*names, **kwargs)


location_options = stack(
    option("--storage", envvar="SEARCH_STORAGE", show_envvar=True,
           help="Optuna storage URL, e.g. postgresql://user@host:5432/db. "
                "Default: an embedded SQLite file in the project directory."),
    option("--tracking-uri", envvar=["SEARCH_TRACKING_URI", "MLFLOW_TRACKING_URI"], show_envvar=True,
           help="MLflow tracking/registry URI: a database URL or http://server. Default: embedded."),
    option("--artifact-location", envvar="SEARCH_ARTIFACT_LOCATION", show_envvar=True,
           help="Artifact root for new MLflow experiments (must be reachable from every node)."),
    option("--project-dir", type=click.Path(path_type=Path), envvar="SEARCH_PROJECT_DIR", show_envvar=True,
           help="Directory for embedded stores, logs and checkpoints [./.search]."),
    option("--checkpoint-dir", type=click.Path(path_type=Path), envvar="SEARCH_CHECKPOINT_DIR", show_envvar=True,
           help="Where trial checkpoints live (shared by all nodes) [<project-dir>/checkpoints]."),
    option("--config", "config_file", type=click.Path(path_type=Path), envvar="SEARCH_CONFIG", show_envvar=True,
           is_eager=True, callback=lambda ctx, _, path: load_config(ctx, path),
           help="TOML file with defaults for any of this command's flags [./search.toml]."),
)  # fmt: skip
"""Flags that say where a study lives; each falls back to its environment variable, then search.toml."""


def load_config(ctx: click.Context, path: Path | None) -> Path | None:
    """Eager, so the file's values are this command's defaults before any other flag is read."""
    from search.cli._settings import config_defaults

    ctx.default_map = {**config_defaults(ctx, path), **(ctx.default_map or {})}
    return path


tensorboard_option = option(
    "--tensorboard", type=click.Path(file_okay=False, path_type=Path), envvar="SEARCH_TENSORBOARD_DIR",
    show_envvar=True, metavar="DIR",
    help="Also write every trial's per-epoch metrics and hyperparameters as TensorBoard event files under "
         "DIR/<study>/trial-<n> (needs: pip install tensorboard).",
)  # fmt: skip
study_name_option = option("--name", help="Optuna study name [the study's own name].")
find_study_options = stack(
    option("--study", help="Built-in study name or .py file (only used to find the study's name)."),
    study_name_option,
)
"""How an existing study is named: ``--study`` (its file or built-in name) or ``--name``."""

outage_option = option(
    "--db-outage-limit", type=float, default=120, envvar="SEARCH_DB_OUTAGE_LIMIT", show_envvar=True,
    metavar="SECONDS",
    help="How long workers ride out a lost database (retrying with backoff), or wait for a SQLite study lock "
    "that another process holds, before they exit with an error (exit code 75).",
)  # fmt: skip
study_options_option = option(
    "--study-option", "study_option", multiple=True, metavar="KEY=VALUE",
    help="Option passed to the study's make_study, e.g. data=synthetic (repeatable).",
)  # fmt: skip
gpu_sharing_options = stack(
    option("--workers-per-gpu", type=int, default=1, metavar="K",
           help="Workers per GPU, K trials at a time on each, for trials too small to keep a GPU busy; the "
                "workers are dealt to the GPUs in turn."),
    option("--gpu-memory-fraction", type=float, metavar="F",
           help="Each local worker's cap on its GPU's memory (0 < F <= 1; 1: none); a trial that needs more "
                "fails out of memory [0.9/n for the n workers on one GPU, none for a worker alone]."),
)  # fmt: skip
"""How local workers share GPUs: ``--workers-per-gpu`` and ``--gpu-memory-fraction``."""
host_option = option("--host", default="127.0.0.1", help="Interface to listen on; 0.0.0.0 shares it with your network.")


def _stall_timeout(_ctx: click.Context, _param: click.Parameter, value: Any) -> int | None:
    from search.settings import parse_stall_timeout

    return parse_stall_timeout(value)


def _patience(_ctx: click.Context, _param: click.Parameter, value: Any) -> str:
    from search.settings import parse_patience

    return parse_patience(value)


def patience_option(default: str) -> Decorator:
    """``--patience EPOCHS|auto|off[:spare=F]``, checked and normalised as it is read."""
    return option("--patience", type=str, default=default, metavar="EPOCHS|auto|off[:spare=F]", callback=_patience,
                  help="End a trial, complete, once its metric has not improved for this many epochs (its "
                       "value is its best epoch's); auto: a fifth of the study's search epochs, at least 2; "
                       "off: never. :spare=F lets a trial whose best is within the top fraction F of the "
                       "complete trials run on to its last epoch.")  # fmt: skip


STALL_HELP = ("Fail a trial as stalled when it finishes no training step and no validation batch for this long "
              "(counted from its start): it is retried, and its worker process exits with code 70 "
              "(a hung thread cannot be stopped); off disables.")  # fmt: skip


def stall_timeout_option(default: int | None, help_: str = STALL_HELP) -> Decorator:
    """``--stall-timeout SECONDS|off``: a positive whole number of seconds or ``off`` (0), checked as it is read."""
    return option("--stall-timeout", type=str, default=default, metavar="SECONDS|off", callback=_stall_timeout,
                  help=help_)  # fmt: skip
