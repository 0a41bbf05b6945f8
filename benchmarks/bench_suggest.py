"""What one trial's suggestion costs: the Gaussian process against TPE, side by side.

For each search space and each number of complete and running trials it builds an in-memory study
(random complete trials with random values, then the running ones, which hold their parameters),
and times ``--reps`` suggestions of a whole trial (``ask`` and every ``suggest_*``) by each sampler
as the service builds it from ``--sampler``: ``gp`` (Optuna's ``GPSampler``, pruned trials read as
the worst complete one) and ``tpe`` (the default TPE). It prints the medians and their ratio. A
suggestion is made in the worker, before the trial's model is built: the GPU waits for it.

Spaces: ``floats`` (one log-uniform and five uniform floats), ``ints`` (three floats and three
wide integers, two of them log-scaled, as LCBench's batch size, width and depth), and the
parameters of the built-in studies ``resmlp``, ``resnet`` and ``tinylm``.

    python benchmarks/bench_suggest.py
    python benchmarks/bench_suggest.py --spaces ints,resmlp --complete 40,100 --running 0,3 --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _floats(t: Any) -> None:
    t.suggest_float("lr", 1e-4, 1e-1, log=True)
    for name in "abcde":
        t.suggest_float(name, 0.0, 1.0)


def _ints(t: Any) -> None:
    t.suggest_float("lr", 1e-4, 1e-1, log=True)
    t.suggest_float("momentum", 0.1, 0.99)
    t.suggest_float("weight_decay", 1e-5, 0.1)
    t.suggest_int("batch_size", 16, 512, log=True)
    t.suggest_int("max_units", 64, 1024, log=True)
    t.suggest_int("num_layers", 1, 5)


def _resmlp(t: Any) -> None:
    from studies.resmlp._study import ResMLPStudy

    ResMLPStudy().suggest(t)


def _resnet(t: Any) -> None:
    from studies.resnet._params import suggest_params

    suggest_params(t)


def _tinylm(t: Any) -> None:
    from studies.tinylm._params import suggest_params

    suggest_params(t, 64)


SPACES: dict[str, Callable[[Any], None]] = {
    "floats": _floats, "ints": _ints, "resmlp": _resmlp, "resnet": _resnet, "tinylm": _tinylm,
}  # fmt: skip


def seconds(space: Callable[[Any], None], sampler: str, complete: int, running: int, reps: int,
            seed: int = 0) -> float:  # fmt: skip
    """Median seconds of ``reps`` whole-trial suggestions by ``sampler`` (a ``--sampler`` value)."""
    import numpy as np
    import optuna

    from search.settings import make_sampler

    rng = np.random.default_rng(seed)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(complete):
        trial = study.ask()
        space(trial)
        study.tell(trial, float(rng.random()))
    for _ in range(running):
        space(study.ask())
    study.sampler = make_sampler(sampler, seed)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        trial = study.ask()
        space(trial)
        times.append(time.perf_counter() - started)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not read by either sampler
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="floats,ints,resmlp,resnet,tinylm")
    parser.add_argument("--complete", default="40,100", help="complete trials, comma-separated [40,100]")
    parser.add_argument("--running", default="0,1,3", help="running trials, comma-separated [0,1,3]")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    unknown = set(args.spaces.split(",")) - set(SPACES)
    if unknown:
        parser.error(f"unknown space(s) {', '.join(sorted(unknown))}; choose from {', '.join(SPACES)}")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    seconds(_floats, "gp", 12, 1, 1)  # imports and first-call set-up, not timed
    print(f"{'space':8} {'complete':>8} {'running':>7} {'gp s':>8} {'tpe s':>8} {'gp/tpe':>7}")
    for name in args.spaces.split(","):
        for complete in (int(n) for n in args.complete.split(",")):
            for running in (int(n) for n in args.running.split(",")):
                gp = seconds(SPACES[name], "gp", complete, running, args.reps)
                tpe = seconds(SPACES[name], "tpe", complete, running, args.reps)
                print(f"{name:8} {complete:8d} {running:7d} {gp:8.3f} {tpe:8.3f} {gp / tpe:7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
