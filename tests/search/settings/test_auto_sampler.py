"""``--sampler auto`` (the default): resolved once, as a study is created, by its workers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search.coordination import Coordinator
from search.exceptions import SearchError
from search.settings import SearchSettings, StudyRecord, make_sampler, resolve_sampler, with_resolved_sampler

RECORD = StudyRecord(study_ref="none", metric="val_loss", direction="minimize", search_epochs=6,
                     settings=SearchSettings(pruner="none"))  # fmt: skip


@pytest.mark.parametrize(
    ("workers", "objectives", "folds", "chosen", "why"),
    [
        (2, 1, 0, "gp:until=100", "2 workers"),
        (1, 1, 0, "gp:until=100", "1 worker"),
        (4, 1, 0, "gp:until=100", "4 workers"),
        (5, 1, 0, "tpe", "5 workers are more than 4"),
        (None, 1, 0, "tpe", "no local workers"),
        (2, 2, 0, "tpe", "2 objectives"),
        (2, 1, 5, "tpe", "a k-fold study"),
    ],
)
def test_auto_picks_the_gaussian_process_then_tpe_for_few_workers(workers, objectives, folds, chosen, why):
    spec, line = resolve_sampler("auto", workers, objectives, folds)
    assert spec == chosen
    assert line.startswith(f"sampler: {chosen}, chosen by --sampler auto for {why}")


def test_a_given_sampler_is_kept_as_given():
    assert resolve_sampler("tpe:startup=5", 2) == ("tpe:startup=5", "")
    assert resolve_sampler("gp", 32) == ("gp", "")


def test_auto_is_never_built_unresolved():
    with pytest.raises(SearchError, match="resolved as a study is created"):
        make_sampler("auto", seed=0)


def test_a_resumed_study_keeps_the_sampler_auto_chose_and_a_given_one_applies():
    stored = replace(RECORD, settings=replace(RECORD.settings, sampler="gp"))
    kept, line = with_resolved_sampler(RECORD, 32, stored=stored)
    assert kept.settings.sampler == "gp" and line == ""
    given = replace(RECORD, settings=replace(RECORD.settings, sampler="random"))
    assert with_resolved_sampler(given, 1, stored=stored)[0].settings.sampler == "random"


def test_a_study_created_without_a_resolved_sampler_stores_tpe_and_resumes_with_it(tmp_path):
    """A caller of the coordinator that left ``auto`` as it is: the workers are not known there."""
    assert RECORD.settings.sampler == "auto"
    coordinator = Coordinator(f"sqlite:///{tmp_path}/study.db", "auto")
    _, created = coordinator.create_or_resume(RECORD, 10)
    assert created and coordinator.read_record().settings.sampler == "tpe"
    _, created = coordinator.create_or_resume(replace(RECORD, settings=replace(RECORD.settings, sampler="gp")), 10)
    assert not created and coordinator.read_record().settings.sampler == "gp"
    coordinator.create_or_resume(RECORD, 12)  # auto again: keeps what the study has
    assert coordinator.read_record().settings.sampler == "gp"
    study = coordinator.load(worker_ordinal=coordinator.join())
    assert type(study.sampler).__name__ == "PrunedAsWorst"  # gp, reading pruned trials (its default)
