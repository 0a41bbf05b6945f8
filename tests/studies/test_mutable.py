"""Which search params a study lets change mid-training, and what the trainer then changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import torch

import trainer
from studies import StudyError, get_study, mutable_params, mutation_fields

optuna.logging.set_verbosity(optuna.logging.WARNING)

DECLARED = {
    "resmlp": {"lr": "lr", "weight_decay": "weight_decay", "dropout": "dropout"},
    "tinylm": {"lr": "lr", "dropout": "dropout"},
    "resnet": {"lr": "lr", "weight_decay": "weight_decay"},
}


def _params(study: Any) -> Any:
    return study.suggest(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask())


def _dropout_rates(model: torch.nn.Module) -> set[float]:
    return {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_builtin_declares_params_that_change_only_their_trainer_field(name: str) -> None:
    """Changing a declared param changes the train config in exactly the field it is mapped onto
    (or, for dropout, only the model's dropout rates and not its weights' shapes)."""
    study = get_study(name)
    assert dict(mutable_params(study)) == DECLARED[name]
    params = _params(study)
    config = study.train_config(params, study.search_fidelity)
    for param, field in DECLARED[name].items():
        changed = dataclasses.replace(params, **{param: getattr(params, param) * 0.5 + 0.01})
        assert mutation_fields(study, params, changed) == {field}
        if field == "dropout":
            data = study.load_data()
            old, new = study.build_model(params, data), study.build_model(changed, data)
            assert _dropout_rates(old) != _dropout_rates(new)
            assert {k: v.shape for k, v in old.state_dict().items()} == {
                k: v.shape for k, v in new.state_dict().items()
            }
            assert study.train_config(changed, study.search_fidelity) == config
        else:
            new_config = study.train_config(changed, study.search_fidelity)
            differs = {k for k, v in new_config.to_dict().items() if config.to_dict()[k] != v}
            assert differs == {field}


def test_a_change_to_a_param_not_declared_mutable_is_refused_by_name() -> None:
    study = get_study("resmlp")
    old = {"lr": 1e-3, "weight_decay": 1e-4, "width": 128, "dropout": 0.1}
    assert mutation_fields(study, old, dict(old)) == frozenset()
    assert mutation_fields(study, old, {**old, "lr": 2e-3, "dropout": 0.2}) == {"lr", "dropout"}
    with pytest.raises(StudyError, match=r"width=128 \(now 256\) cannot change .*mutable params: dropout, lr"):
        mutation_fields(study, old, {**old, "width": 256, "lr": 2e-3})
    with pytest.raises(StudyError, match="depth=None"):
        mutation_fields(study, old, {**old, "depth": 2})


def test_a_study_without_a_declaration_changes_nothing_and_a_wrong_one_is_refused() -> None:
    plain = SimpleNamespace(name="plain")
    assert dict(mutable_params(plain)) == {}
    with pytest.raises(StudyError, match=r"lr=0.1 \(now 0.2\) .*mutable params: none"):
        mutation_fields(plain, {"lr": 0.1}, {"lr": 0.2})
    wrong = SimpleNamespace(name="wrong", mutable_params={"lr": "lr", "batch_size": "batch_size"})
    with pytest.raises(StudyError, match="study 'wrong': mutable_params maps batch_size -> 'batch_size'"):
        mutable_params(wrong)


def test_a_resmlp_trial_goes_on_with_perturbed_params_from_another_trials_checkpoint(tmp_path: Path) -> None:
    """The exploit step end to end on the trainer's side: the study says what changes, the trainer
    applies it on a model built from the new params and records it."""
    study = get_study("resmlp", data="synthetic", rows=300, features=6, classes=3, search_epochs=3)
    data = study.load_data()
    fixed = {"width": 64, "depth": 1, "batch_size": 64, "grad_accum_steps": 1, "warmup_fraction": 0.1}
    parent = study.suggest(optuna.trial.FixedTrial({**fixed, "lr": 3e-3, "weight_decay": 1e-4, "dropout": 0.1}))
    infra = trainer.Infra(cpu=True, num_workers=0)

    def fit(params: Any, infra: trainer.Infra, **kwargs: Any) -> trainer.FitResult:
        model = study.build_model(params, data)
        config = study.train_config(params, study.search_fidelity)
        return trainer.fit(model, data.train, data.val, data.task, config, infra=infra, **kwargs)

    fit(parent, infra.replace(checkpoint_dir=tmp_path / "parent"), hooks=[lambda epoch, metrics: epoch >= 1])
    child = dataclasses.replace(parent, lr=parent.lr * 0.8, dropout=min(parent.dropout * 1.2, 0.5))
    changes = mutation_fields(study, parent, child)
    result = fit(
        child, infra.replace(checkpoint_dir=tmp_path / "child", init_from=tmp_path / "parent", mutable=changes)
    )
    assert result.resumed_from_epoch == 1 and [h["epoch"] for h in result.history] == [2, 3]
    assert {(m.field, m.old, m.new) for m in result.mutations} == {
        ("lr", parent.lr, child.lr),
        ("dropout", parent.dropout, child.dropout),
    }
