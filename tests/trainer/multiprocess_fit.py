"""Run under ``accelerate launch --cpu --num_processes 2`` by ``test_multiprocess.py``.

Reads the model and data the test saved, then on every rank: evaluates the model, fits it with a
hook that stops at epoch 2, and writes what this rank saw to ``<out>/rank<r>.json``. Then, with a
dropout model: an uninterrupted 3-epoch fit, and one stopped after epoch 1 and resumed from its
checkpoint, whose weights must be the same (every rank's random streams are saved and restored).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule
from trainer_helpers import StopAt, residual_mlp

import trainer


def main(inputs: Path, out: Path) -> None:
    saved = torch.load(inputs, weights_only=True)
    model = residual_mlp(8, 16, 3)
    model.load_state_dict(saved["model"])
    train = trainer.TensorData(saved["train_x"], saved["train_y"])
    val = trainer.TensorData(saved["val_x"], saved["val_y"])
    task = trainer.Classification(3)
    config, cpu = trainer.TrainConfig(epochs=5, batch_size=10), trainer.Infra(cpu=True)

    evaluated = trainer.evaluate(model, val, task, config, infra=cpu)
    hook = StopAt(2)
    result = trainer.fit(model, train, val, task, config, infra=cpu, hooks=[hook])

    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    sharded = residual_mlp(8, 16, 3)
    sharded.load_state_dict(saved["model"])
    sharded_result = trainer.fit(sharded, train, val, task, config.replace(sharding="fsdp"), infra=cpu,
                                 hooks=[StopAt(2)])  # fmt: skip
    fsdp = config.replace(epochs=3, sharding="fsdp")
    fsdp_uninterrupted = _dropout_fit(saved, train, val, task, fsdp, cpu)
    fsdp_infra = cpu.replace(checkpoint_dir=out / "fsdp-checkpoints")
    _dropout_fit(saved, train, val, task, fsdp, fsdp_infra, hooks=[StopAt(1)])
    fsdp_resumed = _dropout_fit(saved, train, val, task, fsdp, fsdp_infra)
    tied = _Tied()
    tied_result = trainer.fit(tied, train, val, task, config.replace(epochs=1, sharding="fsdp"), infra=cpu)
    compiled = residual_mlp(8, 16, 3)
    compiled.load_state_dict(saved["model"])
    trainer.fit(compiled, train, val, task, config, infra=cpu.replace(compile=True), hooks=[StopAt(2)])
    masks: list[list[bool]] = []
    uninterrupted = _dropout_fit(saved, train, val, task, config.replace(epochs=3), cpu, masks=masks)
    resumed_infra = cpu.replace(checkpoint_dir=out / "checkpoints")
    _dropout_fit(saved, train, val, task, config.replace(epochs=3), resumed_infra, hooks=[StopAt(1)])
    resumed = _dropout_fit(saved, train, val, task, config.replace(epochs=3), resumed_infra)
    report = {
        "world": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
        "evaluate": evaluated,
        "epochs_run": result.epochs_run,
        "stopped_epoch": result.stopped_epoch,
        "epochs_in_history": [h["epoch"] for h in result.history],
        "hook_calls": hook.calls,
        "effective_batch_size": result.effective_batch_size,
        "weights": _weights(model),
        "compiled_weights": _weights(compiled),
        "history": result.history,
        "tied_val_loss": tied_result.history[-1]["val_loss"],
        "tied_still_shared": tied.mid.weight is tied.inp.weight,
        "fsdp_history": sharded_result.history,
        "fsdp_weights": _weights(sharded),
        "fsdp_resumed_from": fsdp_resumed[1].resumed_from_epoch,
        "fsdp_uninterrupted_weights": _weights(fsdp_uninterrupted[0]),
        "fsdp_resumed_weights": _weights(fsdp_resumed[0]),
        "first_dropout_mask": masks[0],
        "resumed_from": resumed[1].resumed_from_epoch,
        "uninterrupted_weights": _weights(uninterrupted[0]),
        "resumed_weights": _weights(resumed[0]),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


def _dropout_fit(saved, train, val, task, config, infra, *, hooks=(), masks=None):
    model = residual_mlp(8, 16, 3, dropout=0.3)
    torch.manual_seed(1)
    model.load_state_dict({**model.state_dict(), **saved["model"]})
    if masks is not None:  # what dropout zeroed in the first training forward
        dropout = model[1].body[3]
        dropout.register_forward_hook(
            lambda module, inputs, output: (
                masks.append(((output == 0) & (inputs[0] != 0)).flatten().tolist())
                if module.training and not masks
                else None
            )
        )
    result = trainer.fit(model, train, val, task, config, infra=infra, hooks=hooks)
    return model, result


class _Tied(torch.nn.Module):
    """Two layers sharing one weight (as a language model ties its embedding and output head)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.mid, self.out = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)
        self.mid.weight = self.inp.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.mid(torch.relu(self.inp(x)))))


def _weights(model) -> list[float]:
    """Per-parameter sums; of the full parameters for a sharded model (gathered: every rank calls)."""
    if isinstance(model, FSDPModule):
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(model, options=options)
        return [full[name].double().sum().item() for name, _ in model.named_parameters()] if full else []
    return [p.detach().double().sum().item() for p in model.parameters()]


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
    # Left to interpreter exit, torch's gloo process group sometimes aborts the process ("terminate
    # called without an active exception", SIGABRT) after everything above succeeded, and the
    # launcher reports a failure. End the group, then the process, here (as `search` ranks do).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
