"""The median rule's warm-up follows a study's complete trials: at each new one while they are few,
at each 1% more past ``WARMUP_EVERY_TRIAL`` (ranking every curve at each decision is O(trials))."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState, create_trial

from search.settings._pruners import WARMUP_EVERY_TRIAL, AdaptiveMedian


def _complete(study: optuna.Study, n: int) -> None:
    study.add_trials([create_trial(value=float(i % 7), intermediate_values={1: float(i % 5), 2: float(i % 7)})
                      for i in range(n)])  # fmt: skip


def test_the_warm_up_is_recomputed_as_trials_complete_then_at_each_percent():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    pruner = AdaptiveMedian(startup=5, rho=0.9, interval=1, min_trials=1)
    running = create_trial(state=TrialState.RUNNING, intermediate_values={1: 3.0})
    seen = []
    for batch in (10, 1, WARMUP_EVERY_TRIAL - 11, 1, 5, 5, 1):
        _complete(study, batch)
        pruner.prune(study, running)
        seen.append(pruner._seen)
    n = WARMUP_EVERY_TRIAL
    assert seen == [10, 11, n, n, n, n + 11, n + 11]  # past n: again once 1% more (n + 11 >= 1.01 n)
