"""The ``search`` console entry point: run the group, turn user errors into one line and an exit code."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

import click

from search.api._signals import interrupted_exit_code
from search.cli import _commands, _data, _queue, _slurm, _start, _tools, _views  # noqa: F401  (registers the subcommands)
from search.cli._group import cli

EXIT_USAGE = 2
EXIT_TEMPFAIL = 75
"""EX_TEMPFAIL: the database stayed unreachable past --db-outage-limit, or the machine failed (a full
disk, a study lock held too long); the same command may work later."""
EXIT_FAULT = 70
"""EX_SOFTWARE: `search start`'s local workers kept dying (a signal, a crash) and nobody else trains the study."""
EXIT_INTERRUPTED = 130
"""Ctrl-C; SIGTERM and SIGHUP to `search start` exit 143 and 129 (see :mod:`search.api._signals`)."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and exit code 2 for any configuration or infrastructure error,
    75 for a temporary failure: a database unreachable past the outage limit, a full disk (retry later)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    # MLflow's usage telemetry would count every call the service makes for its users (runs,
    # batches, thousands a study) and send them from every worker: a thread, an HTTPS connection
    # per process and CPU on each trial's path. Off in this command and the processes it starts,
    # unless the user set it.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
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
        _fail("interrupted", interrupted_exit_code())
    except Exception as exc:
        if not debug and {c.__name__ for c in type(exc).__mro__} & {"TemporaryFailure", "LockTimeout"}:
            _fail(_one_line(exc), EXIT_TEMPFAIL)
        if not debug and type(exc).__name__ == "WorkerFaultError":
            _fail(_one_line(exc), EXIT_FAULT)
        if debug or not _is_user_error(exc):
            raise
        _fail(_one_line(exc), EXIT_USAGE)


def run() -> None:
    """The process entry point (``search`` and ``python -m search``): :func:`main`, then exit
    without tearing the interpreter down.

    With torch, MLflow and SQLAlchemy loaded, Python's own shutdown (clearing thousands of modules)
    takes about a second here: most of the time between a study's last trial and the prompt. The
    exit handlers still run (logging flushes its files), other threads are stopped and joined as at a
    normal exit, and the standard streams are flushed; then the process ends at once.
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:  # sys.exit("message"): printed, exit code 1
            print(exc.code, file=sys.stderr)
            code = 1
    # What a normal exit does first: threading's exit callbacks (a thread pool's workers are told
    # to stop) and a join of the other non-daemon threads; then the exit handlers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            stream.flush()
    os._exit(code)


def _is_user_error(exc: Exception) -> bool:
    """Errors that mean 'fix your input or infrastructure', printed without a traceback."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"SearchError", "StorageError", "StudyError", "ConfigError", "DataError"}:
        return True
    module = type(exc).__module__
    return module.startswith(("sqlalchemy", "psycopg")) or names & {"OperationalError"} != set()


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    try:
        from storage import explain_db_error, mask
    except Exception:  # noqa: BLE001 - storage refused to load (an Optuna it does not support): that is ``exc``
        return text[0] if text else type(exc).__name__
    if type(exc).__module__.startswith(("sqlalchemy", "psycopg")):
        url = os.environ.get("SEARCH_STORAGE", "")
        return explain_db_error(url, exc) if url else mask(str(exc).splitlines()[0])
    return mask(text[0] if text else type(exc).__name__)


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
