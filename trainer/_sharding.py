"""Sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each process keeps a 1/N shard of the parameters, gradients and optimizer state; a unit's full
parameters are all-gathered for its forward and backward and its gradients reduce-scattered (and,
like DDP's, averaged). Units are the model's children with parameters, and the elements of child
``ModuleList``/``Sequential`` containers (the usual stacks of blocks), then the root. Checkpoints
hold full, unsharded state dicts, so a sharded run writes what an unsharded one would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def shard_model(model: nn.Module, device: torch.device, world: int) -> nn.Module:
    """``model`` on ``device``, sharded in place over the ``world`` processes of the default group."""
    model.to(device)
    mesh = init_device_mesh(device.type, (world,))
    for unit in _units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _units(model: nn.Module) -> Iterator[nn.Module]:
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            yield from (block for block in child if _has_params(block))
        elif _has_params(child):
            yield child


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Reduce-scatter gradients in this backward (the last micro-batch of a step) or hold them."""
    model.set_requires_gradient_sync(sync)  # type: ignore[operator]


def local(value: Tensor) -> Tensor:
    """A plain tensor: the full value of a DTensor (a gradient norm of a sharded model), else itself."""
    return value.full_tensor() if isinstance(value, DTensor) else value


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The unsharded model and optimizer state dicts on the CPU of rank 0 (every rank must call)."""
    return get_model_state_dict(model, options=_FULL), get_optimizer_state_dict(model, optimizer, options=_FULL)


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optimizer_state: dict[str, Any]
) -> None:
    """Load unsharded state dicts (every rank holds them) into the sharded model and optimizer."""
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
