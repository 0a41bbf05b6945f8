"""Built-in studies by name: listing, lookup, options, and isolation from broken studies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import studies
from studies import StudyLoadError, _registry


def test_list_studies_describes_resmlp() -> None:
    listed = studies.list_studies()
    assert listed["resmlp"].startswith("Residual MLP")
    assert all(description and "\n" not in description for description in listed.values())


def test_get_study_by_name_satisfies_the_protocol() -> None:
    study = studies.get_study("resmlp", data="synthetic", rows=300)
    assert isinstance(study, studies.Study)
    assert (study.name, study.metric, study.direction) == ("resmlp", "val_loss", "minimize")


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(StudyLoadError) as info:
        studies.get_study("resmpl")
    message = str(info.value)
    assert "unknown study 'resmpl'" in message
    for name in studies.list_studies():
        assert name in message


def test_bad_option_names_and_values() -> None:
    with pytest.raises(StudyLoadError, match=r"bad study options \(colour\); accepted: data, rows"):
        studies.get_study("resmlp", colour="red")
    with pytest.raises(StudyLoadError, match="option data must be one of digits, synthetic, file"):
        studies.get_study("resmlp", data="imagenet")


def test_missing_or_broken_builtin_does_not_break_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hpsearch_broken_study.py").write_text('"""Always fails."""\nraise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(_registry.BUILTINS, "ghost", "hpsearch_no_such_module")
    monkeypatch.setitem(_registry.BUILTINS, "broken", "hpsearch_broken_study")

    listed = studies.list_studies()
    assert "ghost" not in listed
    assert listed["broken"] == "Always fails."
    with pytest.raises(StudyLoadError, match="'broken' cannot be imported: RuntimeError: boom"):
        studies.get_study("broken")
    assert studies.get_study("resmlp").name == "resmlp"


def test_importing_studies_leaves_optuna_out() -> None:
    # Workers import studies before they decide on a sampler; only `suggest` sees a trial.
    code = "import sys, studies, studies.resmlp; assert 'optuna' not in sys.modules, 'optuna imported'"
    root = Path(studies.__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
