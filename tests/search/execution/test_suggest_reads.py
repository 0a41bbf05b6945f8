"""A trial's params are chosen from one read of the study, and are the params Optuna would choose."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


def _study_with_history(url: str, seed: int):
    """An Optuna study (TPE with constant liar, as the default sampler) with 8 finished trials and
    one running, so the sampler models them and the liar sees a running trial."""
    import optuna
    from optuna.distributions import FloatDistribution

    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=2, constant_liar=True)
    study = optuna.create_study(storage=optuna.storages.RDBStorage(url), sampler=sampler)
    distributions = {"x": FloatDistribution(-2.0, 2.0), "lr": FloatDistribution(1e-3, 0.5, log=True)}
    for i in range(8):
        params = {"x": -2.0 + 0.5 * i, "lr": 1e-3 * 2**i}
        trial = optuna.trial.create_trial(params=params, distributions=distributions, value=(params["x"] - 0.3) ** 2)
        study.add_trial(trial)
    running = study.ask()
    running.suggest_float("x", -2.0, 2.0)
    return study


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_params_are_chosen_from_one_read_and_match_optunas(tmp_path, monkeypatch, seed) -> None:
    from optuna.storages import _CachedStorage

    from search.execution._suggest import suggest_params
    from studies import load_study_file

    sleep = load_study_file(SLEEP_STUDY)
    reads: list[int] = []
    real = _CachedStorage.get_all_trials

    def counting(self, study_id, deepcopy=True, states=None):
        reads.append(study_id)
        return real(self, study_id, deepcopy, states)

    monkeypatch.setattr(_CachedStorage, "get_all_trials", counting)

    # Optuna's own way: the sampler reads the whole study for every param it samples.
    plain = _study_with_history(f"sqlite:///{tmp_path}/plain.db", seed)
    trial = plain.ask()
    reads.clear()
    expected = sleep.suggest(trial)
    assert len(reads) >= 2

    ours = _study_with_history(f"sqlite:///{tmp_path}/ours.db", seed)
    trial = ours.ask()
    reads.clear()
    params = suggest_params(sleep, ours._storage._backend, trial)
    assert len(reads) == 1
    assert params == expected
    assert ours._storage.get_trial(trial._trial_id).params == {"x": params.x, "lr": params.lr}
    assert isinstance(ours._storage, _CachedStorage) and trial.storage is ours._storage  # put back


def test_a_claimed_trials_params_come_from_the_claims_read_and_match_optunas(tmp_path, monkeypatch) -> None:
    """The claim reads the study just after creating the trial (Optuna's per-trial cache, as
    ``study.ask`` would): the params are chosen from that read, with no read of their own."""
    from optuna.storages import _CachedStorage

    from search.execution._suggest import suggest_params
    from studies import load_study_file

    sleep = load_study_file(SLEEP_STUDY)
    plain = _study_with_history(f"sqlite:///{tmp_path}/plain.db", 0)
    expected = sleep.suggest(plain.ask())

    ours = _study_with_history(f"sqlite:///{tmp_path}/ours.db", 0)
    trial = ours.ask()
    ours._thread_local.cached_all_trials = ours._storage.get_all_trials(ours._study_id, deepcopy=False)  # the claim's
    reads: list[int] = []
    real = _CachedStorage.get_all_trials
    monkeypatch.setattr(_CachedStorage, "get_all_trials", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    assert suggest_params(sleep, ours._storage._backend, trial) == expected
    assert reads == []


def test_a_claim_through_the_workers_copy_reads_only_unfinished_trials_and_sees_what_optuna_sees(tmp_path) -> None:
    """The claim's read of the study (what the sampler is given) through the worker's
    ``StudyTrials``: the trials a full read through Optuna gives, while each finished trial is
    read in full once, not at every claim, and a running one once it has its params."""
    import optuna

    import storage
    from search.coordination import Coordinator
    from search.settings import SearchSettings, StudyRecord

    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=2,
                         settings=SearchSettings(sampler="tpe", pruner="none"))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/study.db", "reads")
    coordinator.create_or_resume(record, 12)
    study = coordinator.load(worker_ordinal=coordinator.join())
    copy = storage.StudyTrials(coordinator.storage, study._study_id)
    other, _ = coordinator.claim(study)  # another worker's trial, left running throughout
    fetched = []
    while True:
        before = copy.fetched
        trial, _ = coordinator.claim(study, copy)
        if trial is None:
            break
        fetched.append(copy.fetched - before)
        seen = study._thread_local.cached_all_trials
        full = coordinator.storage.get_all_trials(study._study_id, deepcopy=False)
        assert [(t.number, t.state, t.params, t.values) for t in seen] == [
            (t.number, t.state, t.params, t.values) for t in full
        ]
        if len(fetched) == 1:  # the other worker's suggestion, after this claim's read
            storage.set_trial_params(coordinator.storage, other._trial_id,
                                     [("x", -0.5, optuna.distributions.FloatDistribution(-2, 2))])  # fmt: skip
        storage.set_trial_params(coordinator.storage, trial._trial_id,
                                 [("x", 0.5, optuna.distributions.FloatDistribution(-2, 2))])  # fmt: skip
        study.tell(trial, float(trial.number))
    assert fetched[0] == 2  # the other worker's running trial and this one
    assert fetched[1] == 3  # the other again (read before it had params), this one, the one finished since
    # A running trial read with its params stays as read: this one and the one finished since.
    assert fetched[2:] == [2] * (len(fetched) - 2)
