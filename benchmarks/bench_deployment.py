"""What recording a trial's deployment metrics adds to it: resmlp trials on this machine's device.

Each trial samples resmlp's space (Optuna's random sampler, seeded), trains at the study's search
fidelity with ``trainer.fit``, then records its deployment metrics as a search worker does
(``search.tracking.deployment_metrics``: params, forward FLOPs, latency at batch 1 and at
``--latency-batch``, the fit's peak memory). Printed per trial: the model's shape, the fit's seconds,
the measurement's seconds (timed, as for a complete trial, and untimed, as for a pruned one), and the
medians over the trials. The fit runs first, so the measurement does not pay the process's first use
of torch's FLOP counter (the fit's own FLOP count already did).

    python benchmarks/bench_deployment.py --trials 9 [--search-epochs 15] [--device cuda] [--latency-batch 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import optuna

import trainer
from search.tracking import deployment_metrics
from studies import get_study, study_infra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--latency-batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--search-epochs", type=int, default=15, help="resmlp's search_epochs option [15].")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = get_study("resmlp", search_epochs=args.search_epochs)
    data = study.load_data()
    sampler = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    rows = []
    print("trial  width depth  params     fit_s  timed_s  untimed_s  added   latency_ms  ms/sample@batch")
    for number in range(args.trials):
        params = study.suggest(sampler.ask())
        model = study.build_model(params, data)
        config = study.train_config(params, study.search_fidelity)
        infra = study_infra(study, params, study.search_fidelity).replace(cpu=args.device == "cpu")
        started = time.perf_counter()
        result = trainer.fit(model, data.train, data.val, data.task, config, infra=infra)
        fit_s = time.perf_counter() - started
        started = time.perf_counter()
        timed = deployment_metrics(model, data.val, result, mixed_precision=config.mixed_precision,
                                   batch=args.latency_batch, timed=True)  # fmt: skip
        timed_s = time.perf_counter() - started
        started = time.perf_counter()
        deployment_metrics(model, data.val, result, mixed_precision=config.mixed_precision,
                           batch=args.latency_batch, timed=False)  # fmt: skip
        untimed_s = time.perf_counter() - started
        rows.append((fit_s, timed_s, untimed_s))
        print(f"{number:5d}  {params.width:5d} {params.depth:5d}  {int(timed['params']):8d}  {fit_s:7.2f}  "
              f"{timed_s:7.3f}  {untimed_s:9.5f}  {timed_s / fit_s:5.1%}  {timed.get('latency_ms', 0):10.4f}  "
              f"{timed.get('latency_ms_batch', 0):15.5f}")  # fmt: skip
    fit, timed_all, untimed = (statistics.median(column) for column in zip(*rows, strict=True))
    ratios = statistics.median(t / f for f, t, _ in rows)
    print(f"median over {len(rows)} trials: fit {fit:.2f} s, timed measurement {timed_all:.3f} s "
          f"(median ratio to the fit {ratios:.1%}), untimed {untimed * 1000:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
