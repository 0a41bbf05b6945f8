"""The tiny-LM study: corpus and windows, search space, replay, learning and activation checkpointing."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from torch.utils.checkpoint import checkpoint

import studies
import trainer
from studies import DataError, StudyData
from studies.tinylm import (
    TinyLM,
    TinyLMParams,
    TinyLMStudy,
    Vocab,
    default_corpus,
    make_study,
    split_text,
    windows,
)
from studies.tinylm import _model as tinylm_model
from studies.tinylm._params import HEADS, WIDTHS

SMALL = TinyLMParams(width=64, layers=2, heads=2, context=32, lr=3e-3, warmup_fraction=0.1, dropout=0.0)


@pytest.fixture(scope="module")
def study() -> TinyLMStudy:
    return make_study(context=32, max_chars=12_000)


@pytest.fixture(scope="module")
def data(study: TinyLMStudy) -> StudyData:
    return study.load_data()


def short_config(study: TinyLMStudy, params: TinyLMParams, epochs: int) -> trainer.TrainConfig:
    return study.train_config(params, study.search_fidelity).replace(epochs=epochs)


CPU = trainer.Infra(cpu=True)


def tensors(split: trainer.TrainData) -> trainer.TensorData:
    assert isinstance(split, trainer.TensorData)  # the study keeps every split in memory
    return split


def test_registered_and_default_corpus_is_stable() -> None:
    assert "tinylm" in studies.list_studies()
    # Options typed on the command line arrive as strings.
    study = studies.get_study("tinylm", context="32", activation_checkpointing="true")
    assert isinstance(study, TinyLMStudy) and study.context == 32 and study.activation_checkpointing
    with pytest.raises(studies.StudyLoadError, match="activation_checkpointing must be true or false"):
        studies.get_study("tinylm", activation_checkpointing="maybe")
    assert default_corpus(5000) == default_corpus(5000)
    assert len(default_corpus(5000)) == 5000


def test_windows_predict_the_next_character(data: StudyData) -> None:
    vocab = Vocab(data.info["vocab"])
    x, y = tensors(data.val).x, tensors(data.val).y
    assert x.dtype == y.dtype == torch.int64 and x.shape[1] == 32
    assert torch.equal(x[0, 1:], y[0, :-1])
    assert torch.equal(x[1, 0], y[0, -1])  # validation windows are contiguous, not overlapping
    assert vocab.size == data.info["vocab_size"]
    assert len(vocab.decode(x[0])) == 32


def test_split_is_contiguous_and_complete() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    parts = split_text(text)
    assert "".join(parts) == text
    assert [len(part) for part in parts] == [800, 100, 100]
    pairs = windows(torch.arange(10), context=4, stride=2)
    assert pairs.x.tolist()[1] == [2, 3, 4, 5] and pairs.y.tolist()[1] == [3, 4, 5, 6]


def test_vocab_maps_unseen_characters_to_unknown() -> None:
    vocab = Vocab.fit("hello")
    assert vocab.size == 5  # e, h, l, o + unknown
    assert vocab.encode("hex").tolist() == [2, 1, 0]
    assert vocab.decode(vocab.encode("hole")) == "hole"


def test_trial_fits_and_fixed_trial_replays_it(study: TinyLMStudy, data: StudyData) -> None:
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3)).ask()
    params = study.suggest(trial)
    model = study.build_model(params, data)

    result = trainer.fit(
        model, tensors(data.train).subset(range(64)), data.val, data.task, short_config(study, params, 1), infra=CPU
    )
    assert math.isfinite(result.history[-1]["val_loss"])

    replayed = study.suggest(optuna.trial.FixedTrial(trial.params))
    assert replayed == params
    rebuilt = study.build_model(replayed, data)
    fresh = study.build_model(params, data).state_dict()
    assert str(rebuilt) == str(study.build_model(params, data))
    assert all(torch.equal(fresh[key], value) for key, value in rebuilt.state_dict().items())


def test_short_fit_beats_the_uniform_model(study: TinyLMStudy, data: StudyData) -> None:
    vocab_size = data.info["vocab_size"]
    model = study.build_model(SMALL, data)
    before = trainer.evaluate(model, data.val, data.task, short_config(study, SMALL, 1), infra=CPU)
    assert before["val_perplexity"] == pytest.approx(vocab_size, rel=0.1)  # init is near uniform

    result = trainer.fit(model, data.train, data.val, data.task, short_config(study, SMALL, 2), infra=CPU)
    assert result.history[-1]["val_perplexity"] < vocab_size / 3


def test_every_searched_width_and_head_count_is_valid(study: TinyLMStudy, data: StudyData) -> None:
    for width, heads in itertools.product(WIDTHS, HEADS):
        trial = optuna.trial.FixedTrial(
            {
                "width": width,
                "heads": heads,
                "layers": 1,
                "context": 16,
                "lr": 1e-3,
                "warmup_fraction": 0.0,
                "dropout": 0.0,
            }
        )
        model = study.build_model(study.suggest(trial), data)
        assert model(tensors(data.val).x[:2]).shape == (2, 32, data.info["vocab_size"])


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(
    data: StudyData, dropout: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counting_checkpoint(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return checkpoint(*args, **kwargs)

    monkeypatch.setattr(tinylm_model, "checkpoint", counting_checkpoint)
    plain = dataclasses.replace(SMALL, dropout=dropout)
    checkpointed = dataclasses.replace(plain, activation_checkpointing=True)
    x, y = tensors(data.train).x[:4], tensors(data.train).y[:4]
    results = []
    for params in (plain, checkpointed):
        study = make_study(context=32, max_chars=12_000, activation_checkpointing=params.activation_checkpointing)
        model = study.build_model(params, data).train()
        torch.manual_seed(0)  # the same dropout masks; recomputation in backward replays them
        loss = data.task.loss(model(x), y)
        loss.backward()
        results.append((loss.detach(), [p.grad for p in model.parameters()]))
        assert len(calls) == (SMALL.layers if params.activation_checkpointing else 0)
    with torch.no_grad():
        model.eval()(x)  # never checkpointed outside training
    assert len(calls) == SMALL.layers
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    for grad_a, grad_b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(grad_a, grad_b)


def test_model_is_causal_and_scores_long_windows_in_context_chunks() -> None:
    params = dataclasses.replace(SMALL, context=8)
    model = TinyLM(vocab_size=20, params=params).eval()
    ids = torch.randint(1, 20, (2, 16))
    changed = ids.clone()
    changed[:, 5] = 0
    with torch.no_grad():
        logits = model(ids)
        assert torch.equal(logits[:, :5], model(changed)[:, :5])  # the future is never seen
        torch.testing.assert_close(logits[:, 8:], model(ids[:, 8:]))  # chunks are independent
    with pytest.raises(ValueError, match="multiple"):
        model(torch.zeros(1, 12, dtype=torch.int64))


def test_user_text_file_and_bad_options(tmp_path: Path) -> None:
    text = tmp_path / "book.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 100, encoding="utf-8")
    data = make_study(text_path=text, context=16, max_chars=2000).load_data()
    assert data.info["vocab_size"] == len(set("the quick brown fox jumps over the lazy dog. ")) + 1
    assert data.info["n_chars"] == 2000

    with pytest.raises(DataError, match="not found"):
        make_study(text_path=tmp_path / "missing.txt").load_data()
    text.write_text("short", encoding="utf-8")
    with pytest.raises(DataError, match="max_chars"):
        make_study(text_path=text, context=16, max_chars=2000).load_data()
    with pytest.raises(ValueError, match="max_chars"):
        make_study(context=64, max_chars=100)
    with pytest.raises(ValueError, match="heads"):
        dataclasses.replace(SMALL, heads=3)
