"""Pruning decisions are those a single process would make, with and without workers dying mid-trial.

Each pruner the CLI offers runs against the study's real storage through the real claim path and
the workers' pruning hook (which asks the pruner only at the epochs where it can decide); some
trials lose their worker part-way and are reaped and retried (resuming where their values stop).
The same curves are fed, trial after trial, to plain Optuna in memory, asked at every epoch, where
no trial ever died. Every logical trial must stop at the same epoch in both.
"""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
import pytest

from search.coordination import Coordinator, RetryDeadTrial
from search.execution._pruning import PruningHook
from search.settings import SearchSettings, StudyRecord, make_pruner
from storage import StudyTrials

EPOCHS = 9
TRIALS = 40
NAME = "equivalence"
DEATHS = {3: 2, 7: 1, 11: 4, 12: 3, 20: 1, 26: 6, 31: 3}
"""Logical trial -> the epoch after which its first attempt's worker dies."""

PRUNERS = {
    "hyperband": ("hyperband", lambda: optuna.pruners.HyperbandPruner(1, EPOCHS, 3)),
    "hyperband-min2": ("hyperband:min=2,factor=2", lambda: optuna.pruners.HyperbandPruner(2, EPOCHS, 2)),
    "successive-halving": (
        "successive-halving",
        lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    ),
    "successive-halving-rate1": (
        "successive-halving:factor=2,rate=1",
        lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2, min_early_stopping_rate=1),
    ),
    "successive-halving-auto": ("successive-halving:min=auto,startup=5", None),
    "median": ("median:startup=3,warmup=2", lambda: optuna.pruners.MedianPruner(3, 2)),
    "median-interval": ("median:startup=3,warmup=2,interval=3", lambda: optuna.pruners.MedianPruner(3, 2, 3)),
    "median-auto": ("median:warmup=auto,startup=5", None),  # the default's kind
    "none": ("none", lambda: optuna.pruners.NopPruner()),
}
"""Name -> (spec, the plain Optuna pruner; None: our own class, run in memory and asked every epoch)."""


def _curve(x: float) -> list[float]:
    """A learning curve whose ranking between trials changes over epochs (early values mislead a little)."""
    return [x + 0.8 * math.sin(7 * x) / (e + 1) + 1.0 / e for e in range(1, EPOCHS + 1)]


def _reference(pruner: optuna.pruners.BasePruner, xs: list[float]) -> dict[int, int | None]:
    """Plain Optuna, one process, nobody dies: the pruned epoch of each trial (None: complete)."""
    study = optuna.create_study(study_name=NAME, pruner=pruner)
    decisions: dict[int, int | None] = {}
    for number, x in enumerate(xs):
        study.enqueue_trial({"x": x})
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        decisions[number] = _run(trial, _curve(x), start=1)
        _tell(study, trial, decisions[number], _curve(x))
    return decisions


def _run(trial: Any, curve: list[float], start: int, stop_after: int | None = None) -> int | None:
    for epoch in range(start, EPOCHS + 1):
        trial.report(curve[epoch - 1], epoch)
        if trial.should_prune():
            return epoch
        if stop_after is not None and epoch >= stop_after:
            return -1  # the worker died here
    return None


def _tell(study: optuna.Study, trial: Any, pruned: int | None, curve: list[float]) -> None:
    if pruned is None:
        study.tell(trial, min(curve))
    else:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)


def _run_hook(trial: Any, curve: list[float], start: int, stop_after: int | None, asked: list[int],
              trials: StudyTrials) -> int | None:  # fmt: skip
    """What a worker does: every epoch through the pruning hook, which decides when to ask and
    stores values in batches; the values it holds back are stored with the tell, or lost when its
    worker dies (the retry resumes after the stored ones, as from a checkpoint)."""
    hook = PruningHook(trial, "val_loss", trials)
    try:
        for epoch in range(start, EPOCHS + 1):
            if hook(epoch, {"val_loss": curve[epoch - 1]}):
                return _stored(trials, trial, hook, epoch)
            if stop_after is not None and epoch >= stop_after:
                return -1
        return _stored(trials, trial, hook, None)
    finally:
        asked.append(hook.asked)


def _stored(trials: StudyTrials, trial: Any, hook: PruningHook, outcome: int | None) -> int | None:
    trials.report(trial._trial_id, hook.unstored, refresh=False)  # what the worker's tell stores
    return outcome


def _ours(spec: str, xs: list[float], tmp_path: Any, asked: list[int], fetched: list[int]) -> dict[int, int | None]:
    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=EPOCHS,
                         settings=SearchSettings(sampler="random", pruner=spec, max_retries=3))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/{spec.replace(':', '_')}.db", NAME)
    study, _ = coordinator.create_or_resume(record, len(xs))
    assert isinstance(study.pruner, type(make_pruner(spec, EPOCHS)))
    decisions: dict[int, int | None] = {}
    trials = StudyTrials(coordinator.storage, study._study_id)  # one worker's copy, kept across its trials
    ordinal: dict[int, int] = {}  # first attempt's trial number -> logical trial (0, 1, 2, ...)
    pending = list(range(len(xs)))
    while pending:
        trial, _ = coordinator.claim(study)
        assert trial is not None
        frozen = study._storage.get_trial(trial._trial_id)
        first = "failed_trial" not in frozen.system_attrs
        logical = ordinal.setdefault(int(frozen.system_attrs.get("failed_trial", trial.number)), len(ordinal))
        x = xs[logical]
        if first:
            study._storage.set_trial_param(trial._trial_id, "x", x, optuna.distributions.FloatDistribution(0, 1))
        start = max(frozen.intermediate_values, default=0) + 1  # a retry resumes after its values
        dies = DEATHS.get(logical) if first else None
        outcome = _run_hook(trial, _curve(x), start, dies, asked, trials)
        if outcome == -1:
            _die(coordinator, study, trial._trial_id)
            continue
        decisions[logical] = outcome
        _tell(study, trial, outcome, _curve(x))
        pending.remove(logical)
    fetched.append(trials.fetched)
    return decisions


def _die(coordinator: Coordinator, study: optuna.Study, trial_id: int) -> None:
    """What the reaper does to a trial whose worker stopped beating: queue its retry, then fail it."""
    callback = coordinator.storage.heartbeat_stale_trial_callback
    assert isinstance(callback, RetryDeadTrial)
    assert callback.queue(study, coordinator.storage.get_trial(trial_id)) is not None
    coordinator.storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL)


@pytest.mark.parametrize("name", list(PRUNERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_decisions_match_a_single_process_that_never_lost_a_worker(name, seed, tmp_path):
    spec, plain = PRUNERS[name]
    rng = random.Random(seed)
    xs = [rng.random() for _ in range(TRIALS)]
    expected = _reference(plain() if plain else make_pruner(spec, EPOCHS), xs)
    asked: list[int] = []
    fetched: list[int] = []
    assert _ours(spec, xs, tmp_path, asked, fetched) == expected
    attempts = TRIALS + len(DEATHS)
    # Each ask reads the asking trial, and each attempt is read once more at most once finished:
    # not the whole study at every ask.
    assert fetched[0] <= sum(asked) + attempts, (fetched, sum(asked))
    if name != "none":
        assert any(e is not None for e in expected.values()), "the curves must make the pruner prune"
    reported = sum(EPOCHS if e is None else e for e in expected.values())
    if name == "none":
        assert sum(asked) == 0
    elif name in ("hyperband", "hyperband-min2", "successive-halving", "successive-halving-rate1", "median-interval"):
        assert sum(asked) < reported, (sum(asked), reported)  # epochs between rungs cannot change a decision
