"""The ``search`` command line. Imports here stay light: heavy work happens inside commands."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from search import __version__

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def location_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Flags that say where a study lives; each falls back to its environment variable, then search.toml."""
    options = [
        click.option("--storage", envvar="SEARCH_STORAGE", show_envvar=True,
                     help="Optuna storage URL, e.g. postgresql://user@host:5432/db. "
                          "Default: an embedded SQLite file in the project directory."),
        click.option("--tracking-uri", envvar="SEARCH_TRACKING_URI", show_envvar=True,
                     help="MLflow tracking/registry URI: a database URL or http://server. Default: embedded."),
        click.option("--artifact-location", envvar="SEARCH_ARTIFACT_LOCATION", show_envvar=True,
                     help="Artifact root for new MLflow experiments (must be reachable from every node)."),
        click.option("--project-dir", type=click.Path(path_type=Path), envvar="SEARCH_PROJECT_DIR",
                     show_envvar=True, help="Directory for embedded stores, logs and checkpoints [./.search]."),
        click.option("--checkpoint-dir", type=click.Path(path_type=Path), envvar="SEARCH_CHECKPOINT_DIR",
                     show_envvar=True, help="Where trial checkpoints live (shared by all nodes) "
                                            "[<project-dir>/checkpoints]."),
        click.option("--config", "config_file", type=click.Path(path_type=Path), envvar="SEARCH_CONFIG",
                     help="TOML file with defaults for these flags [./search.toml]."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def resolve(kwargs: dict[str, Any], create: bool = True) -> Any:
    from search._settings import resolve_locations

    return resolve_locations(
        storage=kwargs.pop("storage"), tracking_uri=kwargs.pop("tracking_uri"),
        artifact_location=kwargs.pop("artifact_location"), project_dir=kwargs.pop("project_dir"),
        checkpoint_dir=kwargs.pop("checkpoint_dir"), config_file=kwargs.pop("config_file"), create=create,
    )  # fmt: skip


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


from search import _commands, _views  # noqa: E402,F401  (registers the subcommands)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and exit code 2 for any configuration or infrastructure error."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="search", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail("interrupted", EXIT_INTERRUPTED)
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        _fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INTERRUPTED)
    except Exception as exc:
        if debug or not _is_user_error(exc):
            raise
        _fail(_one_line(exc), EXIT_USAGE)


def _is_user_error(exc: Exception) -> bool:
    """Errors that mean 'fix your input or infrastructure', printed without a traceback."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"SearchError", "StorageError", "StudyError", "ConfigError", "DataError"}:
        return True
    module = type(exc).__module__
    return module.startswith(("sqlalchemy", "psycopg2")) or names & {"OperationalError"} != set()


def _one_line(exc: Exception) -> str:
    from storage import mask

    if type(exc).__module__.startswith(("sqlalchemy", "psycopg2")):
        from storage import explain_db_error

        url = os.environ.get("SEARCH_STORAGE", "")
        return explain_db_error(url, exc) if url else mask(str(exc).splitlines()[0])
    text = str(exc).strip().splitlines()
    return mask(text[0] if text else type(exc).__name__)


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
