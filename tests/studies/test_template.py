"""The study file template renders into a study that loads, searches, trains and replays."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

import studies
import trainer
from studies.template import class_name, render_template


@pytest.fixture(scope="module")
def study_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user") / "spirals_v2.py"
    path.write_text(render_template("spirals_v2"), encoding="utf-8")
    return path


def test_renders_every_placeholder() -> None:
    source = render_template("churn-model")
    assert "$" not in source
    assert 'name: str = "churn-model"' in source
    assert "class ChurnModelStudy:" in source and "study = ChurnModelStudy()" in source
    compile(source, "churn-model.py", "exec")


def test_class_names() -> None:
    assert class_name("digits_v2") == "DigitsV2Study"
    assert class_name("MyStudy") == "MyStudy"


@pytest.mark.parametrize("name", ["", "2fast", "my study", "../x", "a$b"])
def test_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="study name"):
        render_template(name)


def test_rendered_study_loads_trains_and_replays(study_file: Path) -> None:
    study = studies.load_study_file(study_file)
    assert study.name == "spirals_v2"
    assert (study.metric, study.direction) == ("val_loss", "minimize")

    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    params = study.suggest(trial)
    data = study.load_data()
    model = study.build_model(params, data)
    config = study.train_config(params, study.search_fidelity).replace(epochs=2)
    infra = studies.study_infra(study, params, study.search_fidelity).replace(cpu=True)
    assert infra == trainer.Infra(cpu=True)  # the template chooses no infrastructure of its own
    before = trainer.evaluate(model, data.val, data.task, config, infra=infra)["val_loss"]
    result = trainer.fit(model, data.train, data.val, data.task, config, infra=infra)
    assert result.history[-1]["val_loss"] < before

    assert study.suggest(optuna.trial.FixedTrial(trial.params)) == params


def test_rendered_study_is_found_by_get_study(study_file: Path) -> None:
    study = studies.get_study(str(study_file))
    assert study.name == "spirals_v2"
