"""DEHB (differential evolution + Hyperband; the `dehb` package) as a baseline in the simulator.

The YAHPO Gym comparison on LCBench (arXiv 2109.03670) ranks DEHB with Hyperband (normalized
regret 0.031 against TPE + median's 0.020). Here it runs with the simulator's W asynchronous
workers in simulated time through DEHB's own ask/tell interface: a worker asks for a job the moment
it frees up and tells its result when the job's last epoch ends. A job trains its configuration
from scratch for the job's fidelity (DEHB does not continue lower-fidelity runs), so every epoch
it trains is counted. Fidelities are DEHB's Hyperband geometric grid from 1 to the problem's
epochs with eta=3, rounded to whole epochs (52 epochs: 2, 6, 17, 52). A job's fitness is the best
value over its epochs, as a complete trial's value is; only jobs at full fidelity count as
complete trials in the trace, as only trials trained to the end do for the other strategies.

`dehb` pins numpy<2, which the product's constraints do not allow. Its code runs on numpy 2, so
it is installed without its pins: ``pip install --no-deps dehb==0.1.2`` and then
``pip install -c constraints.txt -r benchmarks/requirements-dehb.txt`` (see that file).
"""

from __future__ import annotations

import heapq
import math
import tempfile
from typing import Any

try:  # benchmarks/ on the path, as bench_search.py puts it
    from search_sim import Curve, Event, Problem, Trace
except ModuleNotFoundError:  # imported as benchmarks.dehb_baseline (the tests)
    from benchmarks.search_sim import Curve, Event, Problem, Trace


def configspace(problem: Problem, seed: int) -> Any:
    """The problem's Optuna space as a ConfigSpace (integers stay integers, log scales stay log)."""
    import ConfigSpace as CS
    from optuna.distributions import FloatDistribution, IntDistribution

    space = CS.ConfigurationSpace(seed=seed)
    for name, dist in problem.space().items():
        if isinstance(dist, IntDistribution):
            space.add(CS.UniformIntegerHyperparameter(name, dist.low, dist.high, log=dist.log))
        elif isinstance(dist, FloatDistribution):
            space.add(CS.UniformFloatHyperparameter(name, dist.low, dist.high, log=dist.log))
        else:
            raise TypeError(f"DEHB baseline: unsupported distribution {dist!r} for {name}")
    return space


def dehb_search(problem: Problem, workers: int, seed: int, *, epochs_budget: float) -> Trace:
    """Run DEHB with ``workers`` asynchronous workers until ``epochs_budget`` epochs are trained."""
    from dehb import DEHB

    trace = Trace("dehb", problem.name, workers, seed)
    with tempfile.TemporaryDirectory(prefix="dehb-") as out:
        dehb = DEHB(cs=configspace(problem, seed), min_fidelity=1, max_fidelity=problem.epochs, eta=3,
                    n_workers=1, seed=seed, output_path=out, save_freq="end", log_level="ERROR")  # fmt: skip
        # (end time, order, epoch, job, curve, epochs of the job): one entry per epoch as it is
        # trained, so epochs are counted when they are spent, not when the job ends.
        queue: list[tuple[float, int, int, dict[str, Any], Curve, int]] = []
        order = 0

        def start(now: float) -> None:
            nonlocal order
            job = dehb.ask()
            epochs = min(problem.epochs, max(1, round(job["fidelity"])))
            curve = problem.curve(dict(job["config"]))
            order += 1
            heapq.heappush(queue, (now + curve.seconds[0], order, 1, job, curve, epochs))

        for _ in range(workers):
            start(0.0)
        used = finished = 0
        best = math.inf
        while queue and (used < epochs_budget or finished == 0):
            now, _, epoch, job, curve, epochs = heapq.heappop(queue)
            used += 1
            if epoch < epochs:
                order += 1
                heapq.heappush(queue, (now + curve.seconds[epoch], order, epoch + 1, job, curve, epochs))
                continue
            fitness = min(curve.values[:epochs])
            dehb.tell(job, {"fitness": fitness, "cost": sum(curve.seconds[:epochs])})
            finished += 1
            if epochs == problem.epochs:
                best = min(best, fitness)
                trace.curves.append(curve.values)
            trace.events.append(Event(now, used, finished, best))
            start(now)
    return trace
