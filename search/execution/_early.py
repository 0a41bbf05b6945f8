"""Workers that start before their study exists: they import and load meanwhile, then join or leave."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.execution._machine import schema_checked_env, usable_cores, worker_command, worker_logs

if TYPE_CHECKING:
    from search.settings import Locations

log = logging.getLogger(__name__)

ENV_EARLY = "HPSEARCH_EARLY_WORKER"
"""Set, to a temporary log file, for a worker started before its study exists (and before the
command's input is checked, which must create nothing): it imports what training needs, then waits
for one line on stdin: ``go ["LOG", "NAME", {ENV}]`` (the study NAME is ready: it moves its output
to ``LOG``, takes where the study lives from ``ENV``, the variables of ``location_env``, and joins
it; a study file's name is known only once the command has imported it, and the locations once it
has resolved them, which it does after starting its workers); anything else or EOF (the command
died) ends it without joining. A failed command terminates it."""
_UNRELEASED: dict[int, int] = {}
"""pid of an early worker -> its worker index, until it is released."""
_TEMP_LOGS: dict[int, Path] = {}
"""pid of an early worker -> its temporary log, which it removes once it has joined (or at its exit)."""
ENV_EARLY_STUDY = "HPSEARCH_EARLY_STUDY"
"""For an early worker: ``[ref, options]`` of the study ``search start`` was asked for, loaded with its
data while the worker waits. Used only if the study turns out to be that one (see :func:`preloaded`)."""
_PRELOADED: dict[str, Any] = {}


def spawn_early(count: int, gpus: list[str], debug: bool, study: tuple[str, dict[str, Any]] | None,
                first: int = 0, total: int | None = None, fraction: float | None = None,
                ) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """Start ``count`` local workers (indices from ``first``, of ``total`` in all) before the study
    exists, or is even checked: they import what training needs and load ``study`` (a ``(ref,
    options)`` pair) with its data meanwhile (seconds), each logging to a temporary file until
    :func:`release_workers` lets it join or sends it away. ``fraction``: ``--gpu-memory-fraction``."""
    procs = []
    for index in range(first, first + count):
        cmd, env = worker_command(None, index, total or count, gpus, debug, fraction)
        fd, temp = tempfile.mkstemp(prefix=f"hpsearch-worker-{index}-", suffix=".log")
        env[ENV_EARLY] = temp
        if study is not None:
            env[ENV_EARLY_STUDY] = json.dumps(study)
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE)
        _UNRELEASED[proc.pid] = index
        _TEMP_LOGS[proc.pid] = Path(temp)
        procs.append(proc)
    return procs


def release_workers(procs: list[subprocess.Popen[bytes]], go: str | None, loc: Locations | None = None) -> None:
    """Tell early workers that the study named ``go`` is ready where ``loc`` says, or (None) end
    them: the command failed. Ending them includes those told to join already: a new study's parent
    run is created after they join, and if that fails they are ended before the study is removed."""
    from search.coordination import ENV_OUTAGE_LIMIT
    from search.settings import location_env

    if procs:
        log.debug("%s %d early workers", "releasing" if go is not None else "ending", len(procs))
    if go is not None:
        assert loc is not None, "a released worker needs the study's locations"
        # What a worker started now would inherit that was set after these started.
        env = location_env(loc) | schema_checked_env(loc.storage_url)  # the study is made: its storage is checked
        if ENV_OUTAGE_LIMIT in os.environ:
            env[ENV_OUTAGE_LIMIT] = os.environ[ENV_OUTAGE_LIMIT]
    for proc in procs:
        index = _UNRELEASED.pop(proc.pid, None)
        if go is None:
            # Not joined: it holds nothing yet (no study, no run, no file but its temporary log,
            # removed below), and it may be deep in torch's imports, where it would finish them
            # before it heeds a SIGTERM (seconds of a failed command's time): killed at once.
            # Joined: its trials go with the study, and their runs never started (no parent run).
            _end(proc, grace=0 if index is not None else 3)
        if index is None or proc.stdin is None:
            continue
        if go is not None:
            assert loc is not None
            log_path = worker_logs(loc) / f"worker-{index}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                proc.stdin.write(f"go {json.dumps([str(log_path), go, env])}\n".encode())
                proc.stdin.close()
            except OSError:  # it died already; the caller sees its exit code
                pass
            continue
        proc.stdin.close()
        _TEMP_LOGS[proc.pid].unlink(missing_ok=True)


def start_at_once(count: int) -> int:
    """How many of ``count`` local workers to start with the command, before its study exists: one
    per usable core. More would share cores while they import torch (seconds of CPU each) and make
    every one of them late; the rest start once the first ones have each claimed a trial
    (:func:`start_rest`). Leaving the command a core of its own made the first trial start a little
    sooner, but left a core idle for the first trial's length (seconds to minutes): on a 2-core
    machine the second worker trained one trial of ten.
    """
    return min(count, max(1, usable_cores()))


def start_rest(procs: list[subprocess.Popen[bytes]], count: int, gpus: list[str], debug: bool,
               study: tuple[str, dict[str, Any]] | None, name: str, loc: Locations,
               fraction: float | None = None) -> None:  # fmt: skip
    """Start the local workers :func:`start_at_once` left out (``procs`` has the others; the new ones
    are added in index order), told at once to join ``name``."""
    if len(procs) >= count:
        return
    rest = spawn_early(count - len(procs), gpus, debug, study, first=len(procs), total=count, fraction=fraction)
    release_workers(rest, name, loc)
    procs.extend(rest)


def end_unjoined(procs: list[subprocess.Popen[bytes]]) -> set[int]:
    """End the released early workers (indices into ``procs``) that have not joined yet: they are
    still importing (their temporary log is there), and the study is over, so they would only find
    nothing left to run once their imports are done: seconds that the study's end would wait. They
    hold nothing: no trial, no run. One that joins meanwhile finds the study over, as it would."""
    ended = set()
    for index, proc in enumerate(procs):
        temp = _TEMP_LOGS.get(proc.pid)
        if temp is not None and proc.poll() is None and temp.exists():
            _end(proc, grace=3)
            temp.unlink(missing_ok=True)
            ended.add(index)
    if ended:
        log.debug("ended %d workers that had not joined yet: the study is over", len(ended))
    return ended


def _end(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is not None:
        return
    if grace <= 0:
        proc.kill()
        proc.wait()
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def await_release() -> str | None:
    """In an early worker: import what a trial needs while ``search start`` checks its input and
    creates the study, then wait for its word: the name of the study to join (output now goes to
    the project's log, after what was written so far; the study's locations are now this process's
    environment, as for a worker started after the study), or None: exit. If the imports or the study
    fail here, the word is still awaited, so that the project's log shows why, then it raises."""
    temp = Path(os.environ.pop(ENV_EARLY))  # not for the processes this worker starts
    try:
        try:
            import accelerate  # noqa: F401
            import optuna  # noqa: F401
            import torch._dynamo  # noqa: F401  (what the first optimizer imports)

            _preload(os.environ.pop(ENV_EARLY_STUDY, None))
            if _word_waiting():
                # The study exists already: join and claim at once. MLflow (2 s of import) comes
                # once the first trial trains (its run waits for it, not its training); a thread
                # importing it now would take half of this process's time until the claim. And
                # no collection: it would walk every object imported so far (0.15-0.25 s), which
                # freezing keeps out of the collector's later full passes anyway.
                gc.freeze()
            else:  # the time spent waiting for the word is free: spend it on what comes after
                _import_storage()
                threading.Thread(target=_import_mlflow, name="mlflow-import", daemon=True).start()
                gc.collect()
                gc.freeze()
        except BaseException:
            traceback.print_exc()
            _join(temp)
            raise
        log.debug("imported and preloaded; waiting for the study")
        return _join(temp)
    finally:
        temp.unlink(missing_ok=True)


def _word_waiting() -> bool:
    """Whether ``search start``'s word is already on stdin (the study exists, or the command failed)."""
    import select

    try:
        return bool(select.select([sys.stdin], [], [], 0)[0])
    except (OSError, ValueError):  # no stdin to wait on: _join finds that out
        return True


def _import_storage() -> None:
    """What opening the study's storage imports (SQLAlchemy's ORM and Optuna's table models; not
    Alembic: the command has checked the storage's schema, see ``_machine.ENV_SCHEMA_CHECKED``)."""
    import sqlalchemy.orm  # noqa: F401

    from storage import rdb_models

    rdb_models()  # imports them


def _import_mlflow() -> None:
    from search.tracking import import_mlflow

    try:
        import_mlflow()
    except Exception as exc:  # noqa: BLE001 - the worker meets it again where it needs it
        log.debug("importing MLflow in the background failed: %s", exc)


def _join(temp: Path) -> str | None:
    """Wait for ``search start``'s word; on ``go``, move this process's output so far (``temp``) and
    from now on to the project's log and return the study's name."""
    word, _, rest = sys.stdin.readline().strip().partition(" ")
    try:
        where, name, env = json.loads(rest) if word == "go" else (None, None, None)
    except ValueError:
        where = name = env = None
    if not where or not name or not isinstance(env, dict):
        return None
    os.environ.update({str(k): str(v) for k, v in env.items()})
    sys.stdout.flush()
    sys.stderr.flush()
    with open(where, "ab") as out:
        out.write(temp.read_bytes())
        out.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    return str(name)


def _preload(spec: str | None) -> None:
    """Load the study ``search start`` was asked for, with its data; any error is left for the
    command to report (it checks the same things) and the worker to meet again if it joins."""
    if not spec:
        return
    from search.settings import load_study

    try:
        ref, options = json.loads(spec)
        study = load_study(ref, options)
        _PRELOADED.update(key=json.dumps([ref, options], sort_keys=True), study=study, data=study.load_data())
    except Exception as exc:  # noqa: BLE001 - not this worker's to report
        log.debug("preloading the study failed: %s", exc)
        _PRELOADED.clear()


def preloaded(ref: str, options: dict[str, Any], narrow: Any) -> tuple[Any, Any] | None:
    """The early worker's study and data, if the study it joined is the one it loaded (then forgotten)."""
    key = json.dumps([ref, options], sort_keys=True)
    if narrow or _PRELOADED.get("key") != key:
        _PRELOADED.clear()
        return None
    found = _PRELOADED["study"], _PRELOADED["data"]
    _PRELOADED.clear()
    return found
