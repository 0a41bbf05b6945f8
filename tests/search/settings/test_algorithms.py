"""Every sampler and pruner the CLI lists runs a search, every documented option takes effect, others are refused."""

from __future__ import annotations

import json
import math
from typing import Any

import optuna
import pytest

from search.coordination import Coordinator
from search.exceptions import SearchError
from search.settings import (
    PRUNERS,
    SAMPLERS,
    SearchSettings,
    StudyRecord,
    grid_points,
    make_pruner,
    make_sampler,
    validate,
)

EPOCHS = 6


def _search(tmp_path, sampler: str, pruner: str, trials: int = 14) -> optuna.Study:
    """A short search through the real claim path: each trial reports a curve and asks the pruner."""
    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=EPOCHS,
                         settings=SearchSettings(sampler=sampler, pruner=pruner))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/study.db", "algorithms")
    grid = {"x": [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], "y": list(range(1, 1 + trials // 7))}
    study, _ = coordinator.create_or_resume(record, trials, _points(sampler, grid))
    study = coordinator.load(worker_ordinal=coordinator.join())
    while True:
        trial, _ = coordinator.claim(study)
        if trial is None:
            return study
        x, y = trial.suggest_float("x", -2, 2), trial.suggest_int("y", 1, 8)
        pruned = False
        for epoch in range(1, EPOCHS + 1):
            trial.report((x - 0.5) ** 2 + 1 / (y * epoch), epoch)
            if trial.should_prune():
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, (x - 0.5) ** 2 + 1 / (y * EPOCHS))


def _points(sampler: str, grid: dict[str, list[float]]) -> list[dict[str, float]]:
    """A grid search's trials are its points, queued as the study is created (``search start`` does it)."""
    return grid_points(grid, seed=0) if sampler == "grid" else []


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_runs_past_its_startup_trials(sampler, tmp_path):
    spec = sampler if sampler not in ("tpe", "gp", "cmaes") else f"{sampler}:startup=3"
    study = _search(tmp_path, spec, "none")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 14


@pytest.mark.parametrize("pruner", PRUNERS)
def test_every_pruner_runs(pruner, tmp_path):
    spec = "median:startup=2,warmup=1" if pruner == "median" else pruner
    study = _search(tmp_path, "tpe:startup=4", spec, trials=20)
    states = [t.state.name for t in study.trials]
    assert len(states) == 20 and "FAIL" not in states
    assert ("PRUNED" in states) == (pruner != "none")


def test_sampler_options_reach_the_sampler():
    tpe = make_sampler("tpe:startup=3,multivariate=true,liar=true,candidates=7", seed=1)
    assert tpe._n_startup_trials == 3 and tpe._multivariate is True
    assert make_sampler("tpe:multivariate=false", seed=1)._multivariate is False
    auto = make_sampler("tpe:startup=3", seed=1)  # the default: multivariate=auto
    assert auto.alone._multivariate is True and auto.together._multivariate is False
    assert auto.alone._n_startup_trials == auto.together._n_startup_trials == 3
    assert tpe._constant_liar is True and tpe._parzen_estimator_parameters.consider_endpoints is False
    assert tpe._n_ei_candidates == 7
    assert make_sampler("gp:startup=4", seed=1)._n_startup_trials == 4
    qmc = make_sampler("qmc:type=halton,scramble=false", seed=1)
    assert qmc._qmc_type == "halton" and qmc._scramble is False
    cma = make_sampler("cmaes:startup=2,sigma=0.5", seed=1)
    assert cma._n_startup_trials == 2 and cma._sigma0 == 0.5


def test_pruner_options_reach_the_pruner():
    median = make_pruner("median:startup=2,warmup=3,interval=2,min_trials=4", EPOCHS)
    assert (median._n_startup_trials, median._n_warmup_steps, median._interval_steps, median._n_min_trials) == (
        2, 3, 2, 4,
    )  # fmt: skip
    hyperband = make_pruner("hyperband:min=2,factor=2", EPOCHS)
    assert (hyperband._min_resource, hyperband._max_resource, hyperband._reduction_factor) == (2, EPOCHS, 2)
    sha = make_pruner("successive-halving:min=2,factor=4,rate=1,bootstrap=3", EPOCHS)
    assert (sha._min_resource, sha._reduction_factor, sha._min_early_stopping_rate, sha._bootstrap_count) == (
        2, 4, 1, 3,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("sampler", "pruner", "message"),
    [
        ("tpe:startup=3,warmup=1", "none", "unknown option 'warmup' for sampler 'tpe'"),
        ("random:startup=3", "none", "unknown option 'startup' for sampler 'random' (its options: none)"),
        ("tpe:startup=many", "none", "bad value 'many' for sampler option tpe:startup: expected int"),
        ("tpe:multivariate=maybe", "none", "expected bool"),
        ("qmc:type=lattice", "none", "choose one of sobol, halton"),
        ("tpe:startup", "none", "expected key=value"),
        ("tpe:window=5", "none", "tpe:window in 'tpe:window=5': 0 (no window) or at least startup (10)"),
        ("annealing", "none", "unknown sampler 'annealing'"),
        ("tpe", "hyperband:warmup=5", "unknown option 'warmup' for pruner 'hyperband'"),
        ("tpe", "median:startup=-1", "must be >= 0"),
        ("tpe", "hyperband:factor=1", "factor must be >= 2"),
        ("tpe", "hyperband:min=20", "above the study's 6 search epochs"),
        ("tpe", "pb2", "unknown pruner 'pb2'"),
        ("tpe", "median:warmup=auto,conf=1", "conf is a probability below 1"),
        ("tpe", "median:warmup=auto,rho=1.5", "rho is a rank correlation, at most 1"),
    ],
)
def test_anything_else_is_refused_with_one_line(sampler, pruner, message):
    with pytest.raises(SearchError, match=None) as info:
        validate(sampler, pruner, EPOCHS)
    assert message in str(info.value) and "\n" not in str(info.value)


def _objective(trial: optuna.Trial) -> float:
    x, y = trial.suggest_float("x", -2, 2), trial.suggest_float("y", -2, 2)
    return (x - 0.5 * y) ** 2 + 0.1 * (y - 1) ** 2  # the parameters interact: the joint model's case


def test_the_default_tpe_one_trial_at_a_time_samples_exactly_as_the_joint_model():
    """One worker: every trial is the joint model's (Optuna's default TPE), value for value."""
    auto = optuna.create_study(sampler=make_sampler("tpe:startup=5", seed=3))
    joint = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3, n_startup_trials=5, multivariate=True))
    single = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3, n_startup_trials=5, multivariate=False))
    for study in (auto, joint, single):
        study.optimize(_objective, n_trials=20)
    assert [t.params for t in auto.trials] == [t.params for t in joint.trials]
    assert [t.params for t in auto.trials][5:] != [t.params for t in single.trials][5:]


def test_the_default_tpe_beside_running_trials_samples_exactly_as_the_per_parameter_model():
    """Parallel workers: the first trial, and every trial that starts while another runs, is the
    per-parameter model's (asked through both studies in the same order, one trial kept running)."""
    auto = optuna.create_study(sampler=make_sampler("tpe:startup=5", seed=3))
    single = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3, n_startup_trials=5, multivariate=False))
    for study in (auto, single):
        study.ask().suggest_float("x", -2, 2)  # stays RUNNING for the whole test
        study.optimize(_objective, n_trials=20)
    assert [t.params for t in auto.trials] == [t.params for t in single.trials]
    assert list(auto.sampler._chosen) == [auto.trials[0]._trial_id]  # a told trial's choice is dropped


def test_every_documented_option_has_a_default_of_its_type():
    for registry in (SAMPLERS, PRUNERS):
        for spec in registry.values():
            for name, option in spec.options.items():
                assert isinstance(option.default, option.kind) or (option.auto and option.default == "auto"), name
                assert not option.choices or option.default in option.choices


def test_a_study_record_stored_before_settings_were_nested_still_loads():
    flat = {"study_ref": "resmlp", "metric": "val_loss", "direction": "minimize", "search_epochs": 15,
            "sampler": "random", "pruner": "median", "seed": 3, "max_retries": 1, "heartbeat_interval": 5,
            "grace_period": 30, "options": {"data": "digits"}, "space": {}}  # fmt: skip
    record = StudyRecord.from_json(json.dumps(flat))
    assert record.settings == SearchSettings("random", "median", 3, 1, 5, 30, patience="off")
    assert StudyRecord.from_json(record.to_json()) == record
    assert math.isclose(record.search_epochs, 15)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_samples_through_a_workers_claim_and_suggestion(sampler, tmp_path):
    """A worker's path: the claim reads the study through the worker's own copy of the trials, and
    the params are chosen from that read and stored in one write (``suggest_params``)."""
    from pathlib import Path

    import storage
    from search.execution._suggest import suggest_params
    from studies import load_study_file

    sleep = load_study_file(Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py")
    spec = sampler if sampler not in ("tpe", "gp", "cmaes") else f"{sampler}:startup=3"
    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=EPOCHS,
                         settings=SearchSettings(sampler=spec, pruner="none"))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/study.db", "worker-path")
    coordinator.create_or_resume(record, 10, _points(sampler, {"x": [i / 5 - 1 for i in range(10)], "lr": [0.01]}))
    study = coordinator.load(worker_ordinal=coordinator.join())
    copy = storage.StudyTrials(coordinator.storage, study._study_id)
    while True:
        trial, _ = coordinator.claim(study, copy)
        if trial is None:
            break
        params = suggest_params(sleep, coordinator.storage, trial)
        study.tell(trial, (params.x - 0.3) ** 2)
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 10
    assert all(set(t.params) == {"x", "lr"} for t in trials)
    assert len({t.params["x"] for t in trials}) > 5  # sampled past the start-up trials, not repeated


@pytest.mark.parametrize("through_a_worker", [True, False])
def test_the_default_tpe_samples_alone_only_when_no_other_trial_runs(tmp_path, through_a_worker):
    """The joint model when a trial starts with no other running, the per-parameter one beside a
    running trial and for the study's first; from a worker's read (``storage.TrialList``, which
    looks among the unfinished trials only) as from Optuna's own."""
    import storage

    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", sampler=make_sampler("tpe:startup=3", seed=1))
    sampler = study.sampler
    copy = storage.StudyTrials(study._storage._backend, study._study_id)

    def chosen(trial: optuna.Trial) -> Any:
        frozen = storage.study_storage(study).get_trial(trial._trial_id)
        storage.set_cached_trials(study, copy.refresh(running=False) if through_a_worker else None)
        sampler.before_trial(study, frozen)
        storage.set_cached_trials(study, None)
        return sampler._of(frozen)

    first = study.ask()
    assert chosen(first) is sampler.together  # the study's first
    study.tell(first, 1.0)
    for value in (2.0, 3.0):
        study.tell(study.ask(), value)
    lone = study.ask()
    assert chosen(lone) is sampler.alone
    beside = study.ask()
    assert chosen(beside) is sampler.together  # `lone` runs
    study.tell(lone, 1.5)
    study.tell(beside, 1.5)
    assert chosen(study.ask()) is sampler.alone
