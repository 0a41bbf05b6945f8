"""A write whose reply is lost may have committed: what is trained must be what is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


def _lost_connection() -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("UPDATE", {}, Exception("server closed the connection unexpectedly"))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_lost_reply_after_a_suggestion_never_trains_other_params_than_stored(tmp_path, backend, request,
                                                                               monkeypatch):  # fmt: skip
    from search.cli import StartOptions, prepare
    from search.coordination import Coordinator, _resilience
    from search.execution._suggest import suggest_params
    from search.settings import SearchSettings, load_study

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())
    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings())).record
    coordinator = Coordinator(url, "lost-reply")
    optuna_study, _ = coordinator.create_or_resume(record, 2)
    trial, _ = coordinator.claim(optuna_study)
    storage = optuna_study._storage
    committed = storage.set_trial_param
    writes: list[str] = []

    def commit_then_lose_the_reply(trial_id, name, value, distribution) -> None:
        committed(trial_id, name, value, distribution)
        writes.append(name)
        if writes.count(name) == 1 and name == "lr":
            raise _lost_connection()

    monkeypatch.setattr(storage, "set_trial_param", commit_then_lose_the_reply)
    study = load_study(record.study_ref, record.options, record.narrow)
    params = suggest_params(study, coordinator.storage, trial)
    stored = coordinator.storage.get_trial(trial._trial_id).params
    assert writes[:2] == ["x", "lr"]  # the lost reply happened, and was retried
    assert {"x": params.x, "lr": params.lr} == stored
