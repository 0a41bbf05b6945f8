"""Workers as a Slurm job array: the batch script, and submitting it.

Each array task runs one ``search worker`` (one trial per GPU it is given, or ``--workers-per-gpu``).
The submitting shell's ``SEARCH_*`` variables (and ``PGPASSWORD``) reach the tasks through sbatch's
``--export=ALL``; the script holds no URL and no password. Before the time limit Slurm sends the batch shell SIGUSR1
(``--signal``): the worker stops its trial (queued again, resumed from its checkpoint by another
task) and the task requeues itself. A plain SIGTERM (``scancel``, preemption) stops the worker
the same way without requeueing; with ``--requeue`` Slurm itself brings back a preempted task.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from search.exceptions import SearchError
from search.execution._watchdog import EXIT_STALLED
from search.settings import Locations, location_env


@dataclass(frozen=True)
class SlurmArray:
    study: str
    workers: int
    gpus_per_worker: int = 1
    workers_per_gpu: int = 1
    """Trials at a time on each of a task's GPUs (``search worker --workers-per-gpu``)."""
    cpus_per_worker: int = 4
    time: str = "24:00:00"
    partition: str | None = None
    grace: int = 180
    """Seconds before the time limit that the worker is told to stop."""
    wait_for_db: int = 900
    extra: tuple[str, ...] = ()
    """Further ``#SBATCH`` options, e.g. ``--account=ml``."""

    def script(self, logs: Path) -> str:
        """The batch script; a worker's exit code 0 (budget spent) ends the task, 2 (configuration error)
        fails it, 75 (database unreachable past its outage limit) and a time limit requeue it, and 70
        (a stalled trial, failed and queued again) starts a fresh worker in the same allocation."""
        if self.workers < 1:
            raise SearchError(f"--workers must be >= 1, got {self.workers}")
        if self.workers_per_gpu < 1:
            raise SearchError(f"--workers-per-gpu must be >= 1, got {self.workers_per_gpu}")
        if self.workers_per_gpu > 1 and not self.gpus_per_worker:
            raise SearchError(f"--workers-per-gpu {self.workers_per_gpu} needs --gpus-per-worker 1 or more")
        options = [
            f"--job-name=hpsearch-{self.study}", f"--array=0-{self.workers - 1}", "--ntasks=1",
            f"--cpus-per-task={self.cpus_per_worker}", f"--time={self.time}", f"--signal=B:USR1@{self.grace}",
            "--requeue", "--open-mode=append", f"--output={logs}/{self.study}-%A_%a.log", "--export=ALL",
            *([f"--gres=gpu:{self.gpus_per_worker}"] if self.gpus_per_worker else []),
            *([f"--partition={self.partition}"] if self.partition else []), *self.extra,
        ]  # fmt: skip
        gpus = ["--gpus", "all"] if self.gpus_per_worker else []
        if self.workers_per_gpu > 1:
            gpus += ["--workers-per-gpu", str(self.workers_per_gpu)]
        wait = ["--wait-for-db", str(self.wait_for_db)]
        worker = [sys.executable, "-m", "search", "worker", "--name", self.study, *wait, *gpus]
        header = "\n".join(f"#SBATCH {opt}" for opt in options)
        return _TEMPLATE.format(header=header, worker=shlex.join(worker), stalled=EXIT_STALLED)


def submit(array: SlurmArray, loc: Locations, script_path: Path) -> str:
    """Write the script and submit it with the study's locations in the environment; the job id."""
    logs = loc.project_dir / "logs" / "slurm"
    logs.mkdir(parents=True, exist_ok=True)
    script_path.parent.mkdir(parents=True, exist_ok=True)
    script_path.write_text(array.script(logs))
    env = {**os.environ, **location_env(loc)}
    try:
        proc = subprocess.run(["sbatch", "--parsable", str(script_path)], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    except FileNotFoundError:
        raise SearchError("sbatch not found: run this on a Slurm login node (or use --dry-run)") from None
    if proc.returncode != 0:
        raise SearchError(f"sbatch refused the job: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout.strip().split(";")[0]


_TEMPLATE = """#!/bin/bash
# hpsearch workers as a Slurm job array (written by `search slurm submit`).
{header}
set -u
stop_reason=""
# Before the time limit: stop the worker, then requeue this task so the search goes on.
trap 'stop_reason=timelimit; kill -TERM "$worker" 2>/dev/null' USR1
# scancel or preemption: stop the worker (its trial is queued again and resumes elsewhere).
trap 'stop_reason=cancelled; kill -TERM "$worker" 2>/dev/null' TERM INT

code={stalled}
while [ "$code" = {stalled} ] && [ -z "$stop_reason" ]; do
    {worker} --worker-index "$SLURM_ARRAY_TASK_ID" &
    worker=$!
    while true; do
        wait "$worker"; code=$?
        kill -0 "$worker" 2>/dev/null || break  # a trap interrupted the wait: the worker is still stopping
    done
    # {stalled}: its trial hung (--stall-timeout) and was failed and queued again; a fresh worker goes on.
    [ "$code" = {stalled} ] && echo "hpsearch worker exited with {stalled} (a stalled trial): starting a fresh one"
done
echo "hpsearch worker exited with $code (${{stop_reason:-finished}})"
case "$code:$stop_reason" in
    0:*) exit 0 ;;                 # the study's budget is spent
    2:*) exit 2 ;;                 # configuration error: a requeue cannot help
    75:*) scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"; exit 0 ;;  # database gone: later
    *:timelimit) scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"; exit 0 ;;
    *) exit "$code" ;;
esac
"""
