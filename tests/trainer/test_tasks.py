"""Task metrics against reference implementations."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score
from torch import nn

import trainer


def _run(task, outputs: torch.Tensor, targets: torch.Tensor, chunks: int = 3) -> dict[str, float]:
    state = task.new_state(torch.device("cpu"))
    for out, tgt in zip(outputs.chunk(chunks), targets.chunk(chunks), strict=True):
        task.update(state, out, tgt)
    return task.compute(state)


def test_classification_matches_sklearn() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(90, 5, generator=generator)
    targets = torch.randint(0, 4, (90,), generator=generator)  # class 4 never a target
    metrics = _run(trainer.Classification(5), logits, targets)
    predicted = logits.argmax(1).numpy()
    assert metrics["val_accuracy"] == pytest.approx(accuracy_score(targets.numpy(), predicted))
    assert metrics["val_f1"] == pytest.approx(f1_score(targets.numpy(), predicted, average="macro"))
    assert metrics["val_loss"] == pytest.approx(nn.functional.cross_entropy(logits, targets).item())


def test_evaluate_can_return_the_confusion_matrix() -> None:
    model = nn.Linear(4, 3)
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    data, task, config = trainer.TensorData(x, y), trainer.Classification(3), trainer.TrainConfig(epochs=1)
    metrics, state = trainer.evaluate(model, data, task, config, return_state=True)
    matrix = trainer.Classification.confusion_matrix(state)
    with torch.no_grad():
        predicted = model(x).argmax(1)
    assert matrix.tolist() == confusion_matrix(y.numpy(), predicted.numpy(), labels=[0, 1, 2]).tolist()
    assert metrics == trainer.evaluate(model, data, task, config)


def test_language_modeling_is_per_token_and_ignores_padding() -> None:
    logits = torch.randn(6, 7, 11)
    targets = torch.randint(0, 11, (6, 7))
    targets[0, 3:] = -100
    metrics = _run(trainer.LanguageModeling(), logits, targets)
    keep = targets != -100
    expected = nn.functional.cross_entropy(logits[keep], targets[keep]).item()
    assert metrics["val_loss"] == pytest.approx(expected)
    assert metrics["val_perplexity"] == pytest.approx(math.exp(expected))
    assert trainer.LanguageModeling().loss(logits, targets).item() == pytest.approx(expected)


def test_regression_aligns_column_outputs_with_flat_targets() -> None:
    outputs, targets = torch.randn(30, 1), torch.randn(30)
    mse = ((outputs.squeeze(1) - targets) ** 2).mean().item()
    metrics = _run(trainer.Regression(), outputs, targets)
    assert metrics["val_loss"] == pytest.approx(mse) and metrics["val_rmse"] == pytest.approx(math.sqrt(mse))
    assert trainer.Regression().loss(outputs, targets).item() == pytest.approx(mse)


class _Bigram(nn.Module):
    """Next-token logits from the current token: (B, T) ids -> (B, T, V)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


def _lm_data(n: int, seed: int) -> trainer.TensorData:
    # Token t+1 = (token t + 1) mod 7: a bigram model learns it exactly.
    start = torch.randint(0, 7, (n, 1), generator=torch.Generator().manual_seed(seed))
    sequence = (start + torch.arange(9)) % 7
    return trainer.TensorData(sequence[:, :-1], sequence[:, 1:])


def _regression_data(n: int, seed: int) -> trainer.TensorData:
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
    return trainer.TensorData(x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0]))


@pytest.mark.parametrize(
    ("task", "model", "data", "metric"),
    [
        (trainer.LanguageModeling(), lambda: _Bigram(7), _lm_data, "val_perplexity"),
        (trainer.Regression(), lambda: nn.Linear(4, 1), _regression_data, "val_rmse"),  # (B, 1) vs (B,)
    ],
)
def test_task_trains_through_fit(task, model, data, metric: str) -> None:
    torch.manual_seed(0)
    config = trainer.TrainConfig(epochs=8, batch_size=16, lr=5e-2)
    result = trainer.fit(model(), data(256, 0), data(64, 1), task, config)
    assert result.history[-1][metric] < 0.5 * result.history[0][metric]
