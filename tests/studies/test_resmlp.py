"""The resmlp study: search space, replay through FixedTrial, model shape and a real short fit."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from torch import nn

import trainer
from studies import Fidelity, StudyData
from studies.resmlp import ResMLP, ResMLPParams, ResMLPStudy, make_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def study() -> ResMLPStudy:
    return make_study()


@pytest.fixture(scope="module")
def digits(study: ResMLPStudy) -> StudyData:
    return study.load_data()


def _asked(n: int) -> list[optuna.Trial]:
    search = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    return [search.ask() for _ in range(n)]


def _architecture(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(tensor.shape)) for name, tensor in model.state_dict().items()]


def test_suggest_returns_frozen_params(study: ResMLPStudy) -> None:
    trial = _asked(1)[0]
    params = study.suggest(trial)
    assert isinstance(params, ResMLPParams)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.lr = 1.0  # type: ignore[misc]
    assert 1e-4 <= params.lr <= 1e-2 and 1 <= params.depth <= 6
    # Precision is the study's option, resolved on the machine that trains, never a search dimension.
    assert "mixed_precision" not in trial.params
    native = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    assert params.mixed_precision == ("bf16" if native else "no")
    assert set(trial.params) <= {field.name for field in dataclasses.fields(ResMLPParams)}


def test_fixed_trial_replay_rebuilds_the_same_model(study: ResMLPStudy, digits: StudyData) -> None:
    depths = set()
    for trial in _asked(6):
        params = study.suggest(trial)
        replayed = study.suggest(optuna.trial.FixedTrial(dict(trial.params)))
        assert replayed == params
        searched, rebuilt = study.build_model(params, digits), study.build_model(replayed, digits)
        assert _architecture(rebuilt) == _architecture(searched)
        assert repr(rebuilt) == repr(searched)
        for a, b in zip(searched.state_dict().values(), rebuilt.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b)
        depths.add(params.depth)
    assert len(depths) > 1  # the replay check covered different architectures


def _fixed_params(**changes: Any) -> ResMLPParams:
    base = ResMLPParams(
        lr=3e-3,
        weight_decay=1e-4,
        width=128,
        depth=2,
        dropout=0.1,
        batch_size=64,
        warmup_fraction=0.05,
        grad_accum_steps=1,
    )
    return dataclasses.replace(base, **changes)


def test_model_maps_rows_to_class_logits(study: ResMLPStudy, digits: StudyData) -> None:
    model = study.build_model(_fixed_params(depth=3, width=64), digits)
    assert isinstance(model, ResMLP) and len(model.blocks) == 3
    assert isinstance(digits.train, trainer.TensorData)
    assert model(digits.train.x[:7]).shape == (7, 10)
    assert digits.preprocess is not None and digits.raw_example is not None
    exported = nn.Sequential(digits.preprocess, model).eval()
    assert exported(torch.from_numpy(digits.raw_example)).shape == (5, 10)


def test_train_config_follows_params_and_fidelity(study: ResMLPStudy) -> None:
    params = _fixed_params(batch_size=32, grad_accum_steps=4)
    config = study.train_config(params, Fidelity(epochs=3))
    assert isinstance(config, trainer.TrainConfig)
    assert (config.epochs, config.batch_size, config.grad_accum_steps) == (3, 32, 4)
    assert (config.lr, config.weight_decay, config.mixed_precision) == (3e-3, 1e-4, "no")
    assert study.train_config(params, study.full_fidelity).epochs == 40


def test_options_are_checked_and_coerced(tmp_path: Path) -> None:
    # The command line hands options over as strings.
    options: dict[str, Any] = {"rows": "300", "features": "6", "classes": "3", "search_epochs": "2"}
    study = make_study(data="synthetic", **options)
    assert (study.rows, study.search_fidelity.epochs) == (300, 2)
    data = study.load_data()
    assert (data.info["n_features"], data.info["n_classes"]) == (6, 3)
    assert make_study(path=tmp_path / "x.csv", target="y").data == "file"
    with pytest.raises(ValueError, match="data=file needs both options path and target"):
        make_study(data="file")
    with pytest.raises(ValueError, match="need data=file"):
        make_study(data="synthetic", target="y")


def test_short_fit_on_digits_is_accurate(study: ResMLPStudy, digits: StudyData) -> None:
    params = _fixed_params()
    config, infra = study.train_config(params, Fidelity(epochs=6)), trainer.Infra(cpu=True)
    result = trainer.fit(study.build_model(params, digits), digits.train, digits.val, digits.task, config, infra=infra)
    assert result.history[-1]["val_accuracy"] >= 0.95


@pytest.mark.parametrize("name", ["resmlp", "resnet", "tinylm"])
def test_precision_is_a_study_option_resolved_where_the_fit_runs(name: str) -> None:
    import studies

    native = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    auto = "bf16" if native else "no"
    for option, expected in (("auto", auto), ("no", "no"), ("bf16", "bf16"), ("fp16", "fp16")):
        study = studies.get_study(name, precision=option)
        params = study.suggest(optuna.trial.FixedTrial(_fixed_trial_params(study)))
        assert study.train_config(params, study.search_fidelity).mixed_precision == expected
    with pytest.raises(
        studies.StudyLoadError, match="option precision must be one of auto, no, bf16, fp16, got .half."
    ):
        studies.get_study(name, precision="half")


def _fixed_trial_params(study: Any) -> dict[str, Any]:
    """Params for a FixedTrial: what a real trial of the study suggests."""
    trial = optuna.create_study().ask()
    study.suggest(trial)
    return dict(trial.params)
