"""How --objective and --constraint enter a study's record: the pruner they allow, the samplers
that can search several objectives, and a resume that keeps them (no study or worker needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search.api._objectives import reconcile_objectives, with_objectives
from search.api._options import StartOptions
from search.exceptions import SearchError, StudyMismatchError
from search.settings import SearchSettings, StudyRecord

RECORD = StudyRecord(study_ref="resmlp", metric="val_loss", direction="minimize", search_epochs=5)


def _opts(*objectives: str, constraints: tuple[str, ...] = (), explicit: frozenset[str] | None = frozenset(),
          **settings: str) -> StartOptions:  # fmt: skip
    return StartOptions(study="resmlp", trials=4, settings=SearchSettings(**settings), objectives=objectives,
                        constraints=constraints, explicit=explicit)  # fmt: skip


def _with(opts: StartOptions) -> StudyRecord:
    """As ``prepare`` calls it: the record holds the options' settings."""
    return with_objectives(replace(RECORD, settings=opts.settings), opts)


def test_the_default_objective_keeps_the_pruner_and_stores_nothing():
    record = _with(_opts("val_loss:min"))
    assert record.objectives == [] and record.settings.pruner == SearchSettings().pruner


def test_other_objectives_search_without_the_pruner_and_are_stored_in_order():
    record = _with(_opts("val_loss:min", "latency_ms:min", constraints=("latency_ms<=2",)))
    assert record.objectives == [["val_loss", "minimize"], ["latency_ms", "minimize"]]
    assert record.constraints == ["latency_ms<=2"] and record.settings.pruner == "none"
    assert record.maximize() == [False, False]


def test_a_pruner_given_with_other_objectives_is_refused():
    with pytest.raises(SearchError, match="^--pruner median prunes on the per-epoch val_loss curve"):
        _with(_opts("val_accuracy:max", explicit=frozenset({"pruner"}), pruner="median"))
    # From Python every setting counts as given: only one other than the default is refused.
    assert _with(_opts("val_accuracy:max", explicit=None)).settings.pruner == "none"


def test_cmaes_cannot_search_several_objectives_nsga2_can():
    with pytest.raises(SearchError, match="^--sampler cmaes searches one objective"):
        _with(_opts("val_loss:min", "latency_ms:min", sampler="cmaes"))
    assert _with(_opts("val_loss:min", "latency_ms:min", sampler="nsga2")).settings.sampler == "nsga2"


def test_a_resume_keeps_the_stored_objectives_and_refuses_others():
    stored = _with(_opts("val_loss:min", "latency_ms:min", constraints=("latency_ms<=2",)))
    kept = reconcile_objectives(_opts(), stored)
    assert kept.objectives == ("val_loss:min", "latency_ms:min") and kept.constraints == ("latency_ms<=2",)
    assert reconcile_objectives(_opts("val_loss:min", "latency_ms:min"), stored).objectives == kept.objectives
    with pytest.raises(StudyMismatchError, match="^--objective val_loss:min differs from the study's stored"):
        reconcile_objectives(_opts("val_loss:min"), stored)
    with pytest.raises(StudyMismatchError, match="^--constraint latency_ms<=3 differs from the study's stored"):
        reconcile_objectives(_opts(constraints=("latency_ms<=3",)), stored)
