"""Overhead benchmark: what the service costs around training, this tree against a baseline commit.

Runs the same short study with ``search start`` (``--workers``, one by default; a fresh PostgreSQL
database, or with ``--store sqlite`` the embedded store; MLflow in the project directory) from this
tree and from ``--baseline`` (a git worktree of that commit, put first on ``PYTHONPATH``),
alternately, ``--repeats`` times each, and prints the medians side by side with
their ratio and the issue's target:

  start-up      s from launching ``search start`` to the first trial being claimed
  first epoch   s from launching ``search start`` to the end of the first trial's first epoch (its
                MLflow metrics' timestamp): the start-up plus building the model and that epoch
  end           s from the last trial's end to ``search start`` exiting (``--no-retrain``)
  service/epoch ms of worker time per epoch that is not an epoch's own training and validation:
                (sum of the trials' wall_seconds - sum of their MLflow ``epoch_seconds``) / epochs.
                It includes the claim, the params, the MLflow run, building the model, checkpoints,
                the pruner's reports and answers and the final tell, amortized over the epochs
  in-fit/epoch  the part of it inside the training loop: (sum of ``fit_seconds`` - sum of
                ``epoch_seconds``) / epochs, the issue's own measure (set-up of the model and
                optimizer, checkpoints, the pruner's reports and answers, queueing the metrics)
  per-trial     the rest, per trial: (sum of ``wall_seconds`` - sum of ``fit_seconds``) / trials, ms
                (the claim, the params, the MLflow run, the final metrics' write, the tell)
  xacts/trial   PostgreSQL transactions committed or rolled back in the study's database (every
                process: follower and worker), per trial; heartbeats are put aside with a long
                heartbeat interval (nan with ``--store sqlite``)
  epochs/s      epochs trained per second of the whole command

After each pair of runs it also times a plain torch + Optuna script (its imports, one trial of an
in-memory study, one optimizer step), and prints the median from launch to that step: the floor
any PyTorch + Optuna script pays before its first epoch on this machine, against which to read
the start-up.

Every figure is measured here, in one run; the machine is noisy, so compare medians.

    python benchmarks/bench_overhead.py --baseline 0ce4fd8
    python benchmarks/bench_overhead.py --repeats 5 --trials 12 --pruner none
    python benchmarks/bench_overhead.py --study $PWD/benchmarks/studies/sleep_study.py \
        --study-option epoch_seconds=0 --study-option epochs=10 --trials 30   # all service, no training
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"start-up s": "<= 3", "first epoch s": "-", "end s": "< 1", "service ms/epoch": "<= 2",
           "in-fit ms/epoch": "(<= 2)", "per-trial ms": "-", "xacts/trial": "<= 30 (10 epochs)",
           "epochs/s": "-"}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="HEAD~1", help="git revision to compare with [HEAD~1]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="local workers of `search start` [1]")
    parser.add_argument("--study", default="resmlp", help="a built-in study, or a study file by absolute path")
    parser.add_argument("--study-option", action="append", metavar="KEY=VALUE", help="[data=digits, search_epochs=10]")
    parser.add_argument("--pruner", default="median:warmup=auto", help="the default; `none` trains every epoch")
    parser.add_argument(
        "--store",
        choices=("postgresql", "sqlite"),
        default="postgresql",
        help="the study's store: a fresh PostgreSQL database, or the embedded SQLite one [postgresql]",
    )
    parser.add_argument("--admin-url", default="postgresql+psycopg2://root@127.0.0.1:5432/test")
    return parser.parse_args()


def worktree(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(into), rev], check=True)
    return into


def run_once(tree: Path, args: argparse.Namespace, seed: int) -> dict[str, float]:
    import optuna
    from mlflow import MlflowClient

    admin = sqlalchemy.create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    name = f"hpsearch_overhead_{uuid.uuid4().hex[:8]}"
    postgresql = args.store == "postgresql"
    if postgresql:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    url = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            storage = ["--storage", url] if postgresql else []
            if not postgresql:  # the embedded store that `search start` makes without --storage
                url = f"sqlite:///{Path(tmp) / 'project' / 'optuna.db'}"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "MLFLOW_"))}
            env.update(PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")  # each tree picks its worker's threads
            options = [x for option in args.study_option for x in ("--study-option", option)]
            command = [sys.executable, "-m", "search", "start", "--study", args.study, "--trials", str(args.trials),
                       "--workers", str(args.workers), "--no-retrain", "--seed", str(seed), "--pruner", args.pruner,
                       *options,
                       "--heartbeat-interval", "600", "--grace-period", "1200", *storage,
                       "--project-dir", str(Path(tmp) / "project"), "--quiet"]  # fmt: skip
            launched = time.time()
            done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
            ended = time.time()
            if done.returncode != 0:
                raise SystemExit(f"search start failed in {tree}:\n{done.stdout}\n{done.stderr}")
            xacts = float("nan")  # SQLite keeps no such count
            if postgresql:
                time.sleep(1.5)  # PostgreSQL publishes a backend's counts at its exit, within a second
                with admin.connect() as conn:
                    xacts = conn.execute(sqlalchemy.text(
                        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :n"), {"n": name},
                    ).scalar_one()  # fmt: skip
            [study_name] = optuna.get_all_study_names(url)  # the fresh database's one study
            trials = [t for t in optuna.load_study(study_name=study_name, storage=url).trials if t.datetime_start]
            client = MlflowClient(f"sqlite:///{Path(tmp) / 'project' / 'mlflow.db'}")
            epochs = training = 0.0
            first_epoch = float("inf")
            for trial in trials:
                history = client.get_metric_history(trial.user_attrs["mlflow_run_id"], "epoch_seconds")
                epochs += len(history)
                training += sum(m.value for m in history)
                first_epoch = min([first_epoch, *(m.timestamp / 1000 for m in history)])
            wall = sum(t.user_attrs["wall_seconds"] for t in trials)
            fit = sum(t.user_attrs["fit_seconds"] for t in trials)
            first = min(t.datetime_start for t in trials)
            last = max(t.datetime_complete for t in trials if t.datetime_complete)
    finally:
        if postgresql:
            with admin.connect() as conn:
                conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return {
        "start-up s": _epoch_s(first) - launched,
        "first epoch s": first_epoch - launched,
        "end s": ended - _epoch_s(last),
        "service ms/epoch": 1000 * (wall - training) / max(epochs, 1),
        "in-fit ms/epoch": 1000 * (fit - training) / max(epochs, 1),
        "per-trial ms": 1000 * (wall - fit) / len(trials),
        "xacts/trial": xacts / len(trials),
        "epochs/s": epochs / (ended - launched),
    }


PLAIN_SCRIPT = """
import time
import optuna
import torch

optuna.logging.set_verbosity(optuna.logging.WARNING)
trial = optuna.create_study().ask()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=trial.suggest_float("lr", 1e-4, 1e-1, log=True))
loss = torch.nn.functional.cross_entropy(model(torch.randn(64, 64)), torch.randint(0, 10, (64,)))
loss.backward()
optimizer.step()
print(time.time())
"""


def plain_script_s() -> float:
    """Seconds from launching a plain torch + Optuna script (one process: its imports, an in-memory
    study's first trial, one optimizer step) to that step: the floor any such script pays before
    its first epoch, on this machine now."""
    launched = time.time()
    done = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1]) - launched


def _epoch_s(when: dt.datetime) -> float:
    """Optuna stores naive local times."""
    return when.timestamp()


def main() -> None:
    args = parse_args()
    args.study_option = args.study_option or ["data=digits", "search_epochs=10"]
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    figures: dict[str, list[dict[str, float]]] = {"this tree": [], rev: []}
    plain: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = worktree(rev, Path(tmp) / "baseline")
        try:
            for repeat in range(args.repeats):  # alternate, so drifts of the machine hit both alike
                for label, tree in (("this tree", ROOT), (rev, base)):
                    figures[label].append(run_once(tree, args, seed=repeat))
                    shown = ", ".join(f"{k} {v:.3g}" for k, v in figures[label][-1].items())
                    print(f"  {label:>10} #{repeat + 1}: {shown}", flush=True)
                plain.append(plain_script_s())
                print(f"  plain script #{repeat + 1}: first optimizer step {plain[-1]:.3g} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    options = ",".join(args.study_option)
    print(f"\n{args.study} ({options}), {args.trials} trials, {args.workers} worker(s), pruner {args.pruner}, "
          f"{args.store}; "
          f"medians of {args.repeats} runs each\n")  # fmt: skip
    print(f"{'figure':<18}{'this tree':>12}{rev:>12}{'ratio':>8}   target")
    for key, target in TARGETS.items():
        now = statistics.median(f[key] for f in figures["this tree"])
        before = statistics.median(f[key] for f in figures[rev])
        ratio = now / before if before else float("nan")
        print(f"{key:<18}{now:>12.3g}{before:>12.3g}{ratio:>8.2f}   {target}")
    print(
        f"\na plain torch + Optuna script's first optimizer step: {statistics.median(plain):.3g} s after launch "
        f"(median of {len(plain)}, between the runs): what any such script pays before its first epoch here"
    )


if __name__ == "__main__":
    main()
