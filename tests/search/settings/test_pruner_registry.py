"""A pruner is one class in one module plus one registry line: the example pruner in
``tests/search/data/example_pruner.py`` runs a study through the workers' real path once registered."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import optuna
import pytest

from search.coordination import Coordinator
from search.exceptions import SearchError
from search.execution._pruning import PruningHook
from search.settings import PRUNERS, SearchSettings, StudyRecord, describe, parse_pruner, validate
from storage import StudyTrials

EPOCHS = 6
SPEC = "example:factor=1.2,warmup=3"


@pytest.fixture(scope="module")
def example_module():
    path = Path(__file__).resolve().parents[1] / "data" / "example_pruner.py"
    spec = importlib.util.spec_from_file_location("example_pruner", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["example_pruner"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["example_pruner"]


@pytest.fixture
def example(example_module, monkeypatch):
    monkeypatch.setitem(PRUNERS, "example", example_module.Example)  # the line in search/settings/pruners/__init__.py
    yield example_module
    parse_pruner.cache_clear()  # parsed specs of a pruner no longer registered


def test_a_registered_pruner_is_parsed_checked_and_described_like_the_built_in_ones(example):
    parsed = parse_pruner(SPEC)
    assert parsed is parse_pruner(SPEC)  # parsed once per process and text
    assert parsed.spec() == SPEC and parsed.values == {"factor": 1.2, "warmup": 3}
    validate("tpe", SPEC, EPOCHS)
    assert describe("random", SPEC) == (
        "random search; prune beyond 1.2 x the best complete trial at each epoch, from epoch 3"
    )
    with pytest.raises(SearchError, match=r"^unknown option 'patience' for pruner 'example' \(its options: factor"):
        validate("tpe", "example:patience=2")
    with pytest.raises(SearchError, match=r"^bad pruner 'example:factor=0.5': factor must be >= 1$"):
        validate("tpe", "example:factor=0.5", EPOCHS)


def test_checking_a_spec_against_the_study_builds_no_pruner(example, monkeypatch):
    built = []
    monkeypatch.setattr(example.Example, "build", lambda self, epochs: built.append(epochs))
    validate("tpe", SPEC, EPOCHS)
    with pytest.raises(SearchError, match="above the study's 6 search epochs"):
        validate("tpe", "hyperband:min=7", EPOCHS)
    assert built == []


def test_a_registered_pruner_prunes_a_study_through_the_workers_hook(example, tmp_path):
    """The coordinator builds it from the stored spec; the hook asks it where its class says it can
    decide and hands it the running trials as first read (it reads none of theirs)."""
    record = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=EPOCHS,
                         settings=SearchSettings(sampler="random", pruner=SPEC))  # fmt: skip
    coordinator = Coordinator(f"sqlite:///{tmp_path}/study.db", "registry")
    coordinator.create_or_resume(record, 6)
    study = coordinator.load(worker_ordinal=coordinator.join())
    assert isinstance(study.pruner, example.BeyondBest) and study.pruner.factor == 1.2
    trials = StudyTrials(coordinator.storage, study._study_id)
    levels = [1.0, 1.1, 3.0, 1.05, 0.9, 2.0]  # each trial's curve: level / epoch
    outcomes, asked = [], []
    for level in levels:
        trial, _ = coordinator.claim(study)
        assert trial is not None
        hook = PruningHook(trial, "val_loss", trials)
        assert hook._running is False
        stopped = next((e for e in range(1, EPOCHS + 1) if hook(e, {"val_loss": level / e})), None)
        trials.report(trial._trial_id, hook.unstored, refresh=False)
        if stopped is None:
            study.tell(trial, level / EPOCHS)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        outcomes.append(stopped)
        asked.append(hook.asked)
    assert outcomes == [None, None, 3, None, None, 3]  # beyond 1.2 x the best (1.0) at epoch 3
    assert asked == [4, 4, 1, 4, 4, 1]  # from the warm-up on, never before it
    assert coordinator.claim(study)[0] is None
