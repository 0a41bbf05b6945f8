"""Mixed precision in ``trainer.fit`` on CPU: bf16 autocast, fp16 refused without CUDA, and fp16's
overflow steps (Accelerate's CUDA path, run on the CPU's own grad scaler) skipped and counted."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn
from trainer_helpers import InfGradientAt, blobs, fit_blobs, residual_mlp

import trainer


def test_fp16_without_cuda_is_a_config_error() -> None:
    config = trainer.TrainConfig(epochs=1, mixed_precision="fp16")
    with pytest.raises(trainer.ConfigError, match="fp16"):
        fit_blobs(config, infra=trainer.Infra(cpu=True))


def test_bf16_autocasts_on_cpu_and_precision_can_change_between_fits() -> None:
    model = residual_mlp(8, 16, 3)
    seen: set[torch.dtype] = set()
    model[0].register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
    config = trainer.TrainConfig(epochs=2, batch_size=16, mixed_precision="bf16")
    result = fit_blobs(config, model, infra=trainer.Infra(cpu=True))
    assert seen == {torch.bfloat16}
    assert math.isfinite(result.final_metrics["val_loss"])
    assert getattr(model.forward, "__func__", None) is nn.Sequential.forward  # autocast patch removed
    seen.clear()  # a second fit in the same process, now in fp32, must not inherit the bf16 autocast
    fit_blobs(config.replace(mixed_precision="no"), model, infra=trainer.Infra(cpu=True))
    assert seen == {torch.float32}


def _fp16_on_cpu(config: trainer.TrainConfig, infra: trainer.Infra):
    """Accelerate's CUDA fp16 path (autocast to float16 and a GradScaler) on the CPU's own scaler."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()
    accelerator = Accelerator(mixed_precision="fp16", cpu=True)
    accelerator.native_amp = True
    accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    return accelerator


def test_fp16_overflow_steps_are_skipped_counted_and_do_not_advance_the_schedule(monkeypatch, tmp_path) -> None:
    # AdamW is fused: the scaler hands it the overflow flag and the kernel skips the update itself,
    # so Accelerate's optimizer_step_was_skipped never said so and the schedule moved on regardless.
    import trainer._loop

    monkeypatch.setattr(trainer._loop, "make_accelerator", _fp16_on_cpu)
    torch.manual_seed(0)
    model = residual_mlp(8, 16, 3)
    model[0].weight.register_hook(InfGradientAt(2, 5))  # steps 2 and 5 of 8: one in each epoch
    peak = 0.01
    config = trainer.TrainConfig(epochs=2, batch_size=16, lr=peak, warmup_fraction=0.5)
    after_step: list[dict[str, Tensor]] = []  # the weights after each optimizer step

    def on_step() -> None:
        after_step.append({k: v.clone() for k, v in model.state_dict().items()})

    infra = trainer.Infra(checkpoint_dir=tmp_path)
    result = trainer.fit(model, blobs(64), blobs(32, seed=1), trainer.Classification(3), config, infra=infra,
                         on_step=on_step)  # fmt: skip
    assert [h["skipped_steps"] for h in result.history] == [1, 1]
    assert [h["nonfinite_grad_norms"] for h in result.history] == [1, 1]
    assert all(math.isfinite(h["grad_norm_max"]) and h["grad_norm_max"] >= h["grad_norm"] for h in result.history)
    # 8 steps, warmup 4: epoch 1's last step runs at schedule step 2 (not 3), epoch 2's at 5 (not 7)
    lr = [peak * trainer._optim.lr_factor(s, warmup=4, total=8) for s in (2, 5)]
    assert [h["lr"] for h in result.history] == pytest.approx(lr)
    assert trainer.load_checkpoint(tmp_path / "epoch-0002.pt")["global_step"] == 6
    assert all(torch.isfinite(p).all() for p in model.parameters())
    same = [all(torch.equal(a[k], b[k]) for k in a) for a, b in itertools.pairwise(after_step)]
    assert same == [True, False, False, True, False, False, False]  # steps 2 and 5 moved nothing
