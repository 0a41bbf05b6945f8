"""End-to-end behaviour of ``trainer.fit`` on CPU."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import Tensor, nn
from trainer_helpers import ListSink, StopAt, blobs, fit_blobs, residual_mlp

import trainer


def _digits() -> tuple[trainer.TensorData, trainer.TensorData]:
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0  # border pixels that are always blank in the training split

    def rows(a):
        return torch.tensor((a - mean) / std, dtype=torch.float32)

    return (
        trainer.TensorData(rows(x_train), torch.tensor(y_train)),
        trainer.TensorData(rows(x_val), torch.tensor(y_val)),
    )


def test_residual_mlp_learns_digits() -> None:
    train, val = _digits()
    torch.manual_seed(0)
    model = residual_mlp(64, 128, 10, blocks=1, dropout=0.1)
    config = trainer.TrainConfig(epochs=8, batch_size=64, lr=3e-3, weight_decay=1e-4, warmup_fraction=0.1)
    result = trainer.fit(model, train, val, trainer.Classification(10), config)
    assert result.final_metrics["val_accuracy"] >= 0.95
    assert result.final_metrics["val_f1"] >= 0.95
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_history_has_every_documented_metric() -> None:
    sink = ListSink()
    config = trainer.TrainConfig(epochs=2, batch_size=16)
    result = fit_blobs(config, sink=sink)
    expected = {"epoch", "train_loss", "val_loss", "val_accuracy", "val_f1", "lr", "grad_norm"}
    expected |= {"grad_norm_max", "nonfinite_grad_norms", "skipped_steps", "epoch_seconds", "samples_per_second"}
    expected |= {"model_tflops", "loss_spikes"}  # no mfu or peak_memory_mb on a CPU
    assert [set(h) for h in result.history] == [expected, expected]
    assert [step for step, _ in sink.logged] == [1, 2]
    assert sink.logged[-1][1] == result.history[-1]
    assert all(math.isfinite(v) for h in result.history for v in h.values())
    assert result.effective_batch_size == 16
    assert result.best_epoch in (1, 2)
    assert not result.stopped_early


def test_hook_returning_true_stops_after_that_epoch() -> None:
    hook, bystander = StopAt(2), StopAt(100)
    config = trainer.TrainConfig(epochs=6, batch_size=16)
    result = fit_blobs(config, hooks=[hook, bystander])
    assert result.stopped_early and result.stopped_epoch == 2
    assert result.epochs_run == 2 and len(result.history) == 2
    assert hook.calls == bystander.calls == [1, 2]


def test_early_stopping_hook_stops_a_stalled_run() -> None:
    stopper = trainer.EarlyStopping(patience=2, metric="val_accuracy", mode="max")
    config = trainer.TrainConfig(epochs=30, batch_size=16, lr=1e-2)
    result = fit_blobs(config, hooks=[stopper])
    assert result.stopped_early and result.epochs_run < 30


def test_huge_learning_rate_diverges() -> None:
    # A deep plain MLP (no normalisation) overflows within a few steps at lr=1e6.
    layers = [nn.Linear(8, 32), nn.ReLU()]
    layers += [m for _ in range(4) for m in (nn.Linear(32, 32), nn.ReLU())]
    model = nn.Sequential(*layers, nn.Linear(32, 3))
    config = trainer.TrainConfig(epochs=3, batch_size=16, lr=1e6, max_grad_norm=None)
    with pytest.raises(trainer.DivergenceError) as caught:
        trainer.fit(model, blobs(256), blobs(64, seed=1), trainer.Classification(3), config)
    assert caught.value.epoch == 1 and 0 < caught.value.step < 16
    assert not math.isfinite(caught.value.loss)


class _BreaksAt(nn.Module):
    """A linear model whose output turns to NaN from the ``at``-th training forward on."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 3)
        self.at, self.calls = at, 0

    def forward(self, x: Tensor) -> Tensor:
        out = self.linear(x)
        if self.training:
            self.calls += 1
            if self.calls > self.at:
                out = out * math.nan
        return out


def test_divergence_names_the_first_bad_epoch_and_step() -> None:
    # 640 rows / batch 8 = 80 steps per epoch; forward 150 is epoch 2, step 70 (past a 50-step check).
    config = trainer.TrainConfig(epochs=3, batch_size=8)
    with pytest.raises(trainer.DivergenceError) as caught:
        trainer.fit(_BreaksAt(150), blobs(640), blobs(32, seed=1), trainer.Classification(3), config)
    assert (caught.value.epoch, caught.value.step) == (2, 70)


@pytest.mark.parametrize("max_grad_norm", [None, 0.01])
def test_grad_norm_is_the_global_norm_before_clipping(max_grad_norm: float | None) -> None:
    torch.manual_seed(0)
    model, data = residual_mlp(8, 16, 3), blobs(64)
    trainer.Classification(3).loss(model(data.x), data.y).backward()
    expected = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    config = trainer.TrainConfig(epochs=1, batch_size=64, max_grad_norm=max_grad_norm)  # one step
    result = trainer.fit(model, data, blobs(32, seed=1), trainer.Classification(3), config)
    assert result.history[0]["grad_norm"] == pytest.approx(expected.item(), rel=1e-5)


def test_time_in_hooks_and_sink_is_reported_apart_from_training() -> None:
    import time

    class SlowSink:
        def log(self, metrics, step: int) -> None:
            time.sleep(0.15)  # a tracker on a slow network

    def slow_hook(epoch: int, metrics) -> bool:
        time.sleep(0.1)
        return False

    result = fit_blobs(trainer.TrainConfig(epochs=2, batch_size=16), hooks=[slow_hook], sink=SlowSink())
    assert 0.5 <= result.callback_seconds < result.fit_seconds
    assert fit_blobs(trainer.TrainConfig(epochs=2, batch_size=16)).callback_seconds < 0.05


def test_on_step_is_called_after_every_optimizer_step() -> None:
    calls = []
    config = trainer.TrainConfig(epochs=2, batch_size=16, grad_accum_steps=2)
    fit_blobs(config, on_step=lambda: calls.append(1))
    assert len(calls) == 2 * (128 // (16 * 2))  # epochs x optimizer steps per epoch, not micro-batches


def test_profiled_records_the_active_steps_and_refuses_a_short_run(tmp_path) -> None:
    with trainer.profiled(tmp_path / "p", wait=1, warmup=1, active=2) as prof:
        fit_blobs(trainer.TrainConfig(epochs=1, batch_size=16), on_step=prof.step)
    assert prof.steps == 128 // 16 and prof.trace.exists() and "Self CPU" in prof.table
    short = pytest.raises(ValueError, match="profiled 2 optimizer steps, the schedule needs 9")
    with short, trainer.profiled(tmp_path / "q", wait=1, warmup=1, active=7) as prof:
        fit_blobs(trainer.TrainConfig(epochs=1, batch_size=64), on_step=prof.step)


def test_nan_loss_stops_within_a_few_steps() -> None:
    # One epoch of 80 steps breaking at its 3rd: before, the check ran every 50 micro-batches.
    model = _BreaksAt(2)
    seen = []
    model.register_forward_hook(lambda *_: seen.append(1) if model.training else None)
    config = trainer.TrainConfig(epochs=1, batch_size=8)
    with pytest.raises(trainer.DivergenceError) as caught:
        trainer.fit(model, blobs(640), blobs(32, seed=1), trainer.Classification(3), config)
    assert caught.value.step == 2 and len(seen) <= 8


def test_model_flops_are_counted_once_and_tokens_per_second_for_language_models() -> None:
    # Linear(8, 16) -> ReLU -> Linear(16, 3): forward 2*8*16 + 2*16*3 = 352 FLOPs per row; backward
    # 2*16*3 (input grad) + 2*16*3 + 2*8*16 (weight grads) = 448, the first layer's input needs none.
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    result = fit_blobs(trainer.TrainConfig(epochs=2, batch_size=16), model)
    for h in result.history:
        assert h["model_tflops"] * 1e12 == pytest.approx(800 * h["samples_per_second"])
        assert "tokens_per_second" not in h and "mfu" not in h

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(11, 8), nn.Linear(8, 11)

        def forward(self, ids: Tensor) -> Tensor:
            return self.head(self.embed(ids))

    ids = torch.randint(0, 11, (64, 6))
    data = trainer.TensorData(ids, ids.roll(-1, dims=1))
    config = trainer.TrainConfig(epochs=1, batch_size=16)
    history = trainer.fit(TinyLM(), data, data, trainer.LanguageModeling(), config).history
    assert history[0]["tokens_per_second"] == pytest.approx(6 * history[0]["samples_per_second"])


class _SpikesAt(nn.Module):
    """A linear model whose logits are scaled up 30-fold in the given training forwards only."""

    def __init__(self, *at: int) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 3)
        self.at, self.calls = set(at), 0

    def forward(self, x: Tensor) -> Tensor:
        out = self.linear(x)
        if self.training:
            self.calls += 1
            if self.calls in self.at:
                out = out * 30
        return out


def test_loss_spikes_are_counted_per_epoch() -> None:
    # 20 micro-batches per epoch: a spike in epoch 1 (forward 13) and none in epoch 2.
    torch.manual_seed(0)
    config = trainer.TrainConfig(epochs=2, batch_size=16, lr=1e-3)
    result = trainer.fit(_SpikesAt(13), blobs(320), blobs(32, seed=1), trainer.Classification(3), config)
    assert [h["loss_spikes"] for h in result.history] == [1, 0]


@pytest.mark.slow
def test_a_compiled_fit_trains_like_eager_and_hands_back_a_plain_module(tmp_path) -> None:
    def model() -> nn.Module:
        torch.manual_seed(0)
        return residual_mlp(8, 16, 3)

    config = trainer.TrainConfig(epochs=2, batch_size=32)
    from torch._dynamo.utils import counters

    eager, compiled = model(), model()
    a = fit_blobs(config, eager)
    counters.clear()
    b = fit_blobs(config, compiled, infra=trainer.Infra(checkpoint_dir=tmp_path / "compiled", compile=True))
    compiles = counters["stats"]["unique_graphs"]
    assert b.history[-1]["val_loss"] == pytest.approx(a.history[-1]["val_loss"], rel=1e-4)
    for p, q in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert type(compiled) is type(eager) and compiled._compiled_call_impl is None
    assert compiles > 0  # dynamo compiled the model's forward (a silent fallback to eager would not)
    state = trainer.load_checkpoint(tmp_path / "compiled" / "epoch-0002.pt")
    assert set(state["model"]) == set(eager.state_dict())  # no _orig_mod. prefixes


def test_steps_do_not_search_the_filesystem_for_packages(monkeypatch) -> None:
    """Accelerate asks whether an optional package is installed in every backward and optimizer step
    (a filesystem search each time); the trainer answers it once, so longer fits search no more."""
    import importlib.util

    searches = []
    real = importlib.util.find_spec

    def counting(name, *args, **kwargs):
        searches.append(name)
        return real(name, *args, **kwargs)

    fit_blobs(trainer.TrainConfig(epochs=1, batch_size=16))  # the first fit may look once
    monkeypatch.setattr(importlib.util, "find_spec", counting)
    fit_blobs(trainer.TrainConfig(epochs=1, batch_size=32))  # 4 steps
    few = len(searches)
    fit_blobs(trainer.TrainConfig(epochs=1, batch_size=4))  # 32 steps
    assert len(searches) - few == few, searches  # Accelerate's per-fit and per-epoch looks only
