"""The ResNet study: search space, replay, learning on digits, augmentation and image folders."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
from PIL import Image

import studies
import trainer
from studies import DataError, StudyData
from studies.resnet import Augment, ResNet, ResNetParams, ResNetStudy, make_study
from studies.resnet._model import random_shift

SMALL = ResNetParams(width=16, blocks=1, augment=0.3, lr=3e-3, weight_decay=1e-4, batch_size=64)


@pytest.fixture(scope="module")
def study() -> ResNetStudy:
    return make_study()


@pytest.fixture(scope="module")
def digits(study: ResNetStudy) -> StudyData:
    return study.load_data()


def short_config(study: ResNetStudy, params: ResNetParams, epochs: int) -> trainer.TrainConfig:
    return study.train_config(params, study.search_fidelity).replace(epochs=epochs)


def on_cpu(study: ResNetStudy, params: ResNetParams) -> trainer.Infra:
    return studies.study_infra(study, params, study.search_fidelity).replace(cpu=True)


def tensors(split: trainer.TrainData) -> trainer.TensorData:
    assert isinstance(split, trainer.TensorData)  # the study keeps every split in memory
    return split


def test_registered_and_digits_shapes(digits: StudyData) -> None:
    assert "resnet" in studies.list_studies()
    assert isinstance(studies.get_study("resnet"), ResNetStudy)
    assert tensors(digits.train).x.shape[1:] == (1, 8, 8)
    assert digits.info["n_classes"] == 10
    assert len(tensors(digits.train)) + len(tensors(digits.val)) + len(tensors(digits.test)) == 1797
    # Standardised with training statistics.
    assert abs(float(tensors(digits.train).x.mean())) < 1e-4
    assert float(tensors(digits.train).x.std()) == pytest.approx(1.0, abs=1e-3)


def test_trial_fits_and_fixed_trial_replays_it(study: ResNetStudy, digits: StudyData) -> None:
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    params = study.suggest(trial)
    model = study.build_model(params, digits)

    train, val = tensors(digits.train).subset(range(256)), tensors(digits.val).subset(range(128))
    result = trainer.fit(model, train, val, digits.task, short_config(study, params, 1), infra=on_cpu(study, params))
    assert math.isfinite(result.history[-1]["val_loss"])

    replayed = study.suggest(optuna.trial.FixedTrial(trial.params))
    assert replayed == params
    rebuilt = study.build_model(replayed, digits)
    assert str(rebuilt) == str(study.build_model(params, digits))
    fresh = study.build_model(params, digits).state_dict()
    assert all(torch.equal(fresh[key], value) for key, value in rebuilt.state_dict().items())


def test_learns_digits(study: ResNetStudy, digits: StudyData) -> None:
    model = study.build_model(SMALL, digits)
    config, infra = short_config(study, SMALL, 3), on_cpu(study, SMALL)
    result = trainer.fit(model, digits.train, digits.val, digits.task, config, infra=infra)
    assert result.history[-1]["val_accuracy"] > 0.8  # chance is 0.10


def test_convolutions_run_channels_last_with_cudnn_autotuning(study: ResNetStudy) -> None:
    # Speed only (no effect on CPU): the study's infrastructure, not its hyperparameters.
    infra = studies.study_infra(study, SMALL, study.full_fidelity)
    assert infra == trainer.Infra(channels_last=True, cudnn_benchmark=True)


def test_exported_model_takes_raw_pixels(study: ResNetStudy, digits: StudyData) -> None:
    assert digits.preprocess is not None and digits.raw_example is not None
    model = study.build_model(SMALL, digits).eval()
    exported = torch.nn.Sequential(digits.preprocess, model).eval()
    with torch.no_grad():
        from_raw = exported(torch.from_numpy(digits.raw_example))
        from_split = model(tensors(digits.train).x[: len(digits.raw_example)])
    torch.testing.assert_close(from_raw, from_split)


def test_digits_upscaled_by_preprocess_still_take_raw_pixels() -> None:
    study = studies.get_study("resnet", image_size="16")
    data = study.load_data()
    assert tensors(data.train).x.shape[1:] == (1, 16, 16)
    assert data.preprocess is not None and data.raw_example is not None
    assert data.raw_example.shape[1:] == (1, 8, 8)
    model = study.build_model(SMALL, data).eval()
    with torch.no_grad():
        exported = torch.nn.Sequential(data.preprocess, model)(torch.from_numpy(data.raw_example))
        torch.testing.assert_close(exported, model(tensors(data.train).x[:5]))


def test_augmentation_only_in_training_mode(study: ResNetStudy, digits: StudyData) -> None:
    model = study.build_model(ResNetParams(16, 1, 1.0, 1e-3, 1e-4, 32), digits)
    assert isinstance(model, ResNet)
    x = tensors(digits.val).x[:16]
    with torch.no_grad():
        model.eval()
        assert torch.equal(model(x), model(x))
        model.train()
        torch.manual_seed(0)
        augmented = model.augment(x)
    assert not torch.equal(augmented, x)
    assert model.augment.eval()(x) is x


def test_random_shift_moves_each_image_by_at_most_max_shift() -> None:
    torch.manual_seed(0)
    images = torch.zeros(200, 1, 9, 9)
    images[:, :, 4, 4] = 1.0
    shifted = random_shift(images, 2)
    rows, cols = (shifted[:, 0] == 1).nonzero()[:, 1:].T
    assert len(rows) == 200  # exactly one bright pixel in each image
    assert (rows - 4).abs().max() == 2 and (cols - 4).abs().max() == 2
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) > 10  # offsets differ per image


def test_augment_strength_zero_is_identity() -> None:
    augment = Augment.from_strength(0.0, image_size=32).train()
    x = torch.randn(4, 3, 32, 32)
    assert torch.equal(augment(x), x)


def _write_images(root: Path, per_class: int, rgb_class: str | None = None) -> None:
    rng = np.random.default_rng(0)
    for label, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, size=(12, 10), dtype=np.uint8)
            pixels[:, label * 5 : label * 5 + 5] += 150  # bright left half vs right half
            image = Image.fromarray(pixels, mode="L")
            if name == rgb_class:
                image = image.convert("RGB")
            image.save(root / name / f"{i}.png")


def test_folder_of_grayscale_images(tmp_path: Path) -> None:
    _write_images(tmp_path, per_class=10)
    data = make_study(folder=tmp_path, image_size=8).load_data()
    assert data.class_names == ["cat", "dog"]
    assert tensors(data.train).x.shape[1:] == (1, 8, 8)
    assert len(tensors(data.train)) + len(tensors(data.val)) + len(tensors(data.test)) == 20
    assert sorted(tensors(data.val).y.tolist()) == [0, 0, 1, 1]  # stratified: both classes in every split


def test_folder_with_any_colour_image_is_all_rgb(tmp_path: Path) -> None:
    _write_images(tmp_path, per_class=10, rgb_class="dog")
    study = make_study(folder=tmp_path, image_size=16)
    data = study.load_data()
    assert data.info["in_channels"] == 3
    assert data.raw_example is not None and data.raw_example.shape[1:] == (3, 16, 16)
    model = study.build_model(SMALL, data)
    assert model.eval()(tensors(data.val).x).shape == (len(tensors(data.val)), 2)


def test_bad_options_and_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data must be one of"):
        make_study(data="cifar")
    with pytest.raises(ValueError, match="folder"):
        make_study(data="folder")
    with pytest.raises(DataError, match="not found"):
        make_study(folder=tmp_path / "missing").load_data()
    (tmp_path / "only").mkdir()
    with pytest.raises(DataError, match="at least two classes"):
        make_study(folder=tmp_path).load_data()
