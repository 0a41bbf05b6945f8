"""Sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each process keeps a 1/N shard of the parameters, gradients and optimizer state; a unit's full
parameters are all-gathered for its forward and backward and its gradients reduce-scattered (and,
like DDP's, averaged). Units are the model's children with parameters, and the elements of child
``ModuleList``/``Sequential`` containers (the usual stacks of blocks), then the root; a unit holding
a parameter another unit shares (tied embedding and output weights) is left to the root. As DDP
does, every process starts from rank 0's weights and buffers, and buffers (BatchNorm statistics)
are rank 0's before each validation and checkpoint. Checkpoints hold full, unsharded model state
dicts (the optimizer state keyed by parameter name, not by index as an unsharded run keys it).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

# FSDP, DTensor and distributed checkpointing are imported by the functions that shard (about
# 0.8 s of imports on top of torch's): the processes that never shard, the command following a
# study and most workers, do without them. Until FSDP has been imported nothing can be sharded,
# and until DTensor has, no tensor is one.


def shard_model(model: nn.Module, device: torch.device, world: int) -> nn.Module:
    """``model`` on ``device``, sharded in place over the ``world`` processes of the default group."""
    model.to(device)
    for tensor in [*model.parameters(), *model.buffers()]:  # rank 0's initialisation, as DDP starts
        dist.broadcast(tensor.data, src=0)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for unit in _units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def sync_buffers(model: nn.Module) -> None:
    """Rank 0's buffers on every process (FSDP, unlike DDP, never syncs them)."""
    for buffer in model.buffers():
        dist.broadcast(buffer.data, src=0)


def _units(model: nn.Module) -> list[nn.Module]:
    candidates: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            candidates += [block for block in child if _has_params(block)]
        elif _has_params(child):
            candidates.append(child)
    owners = Counter(id(p) for unit in candidates for p in unit.parameters())  # parameters() dedups
    return [unit for unit in candidates if all(owners[id(p)] == 1 for p in unit.parameters())]


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def is_sharded(model: nn.Module) -> bool:
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Reduce-scatter gradients in this backward (the last micro-batch of a step) or hold them."""
    model.set_requires_gradient_sync(sync)  # type: ignore[operator]


def local(value: Tensor) -> Tensor:
    """A plain tensor: the full value of a DTensor (a gradient norm of a sharded model), else itself."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    return value.full_tensor() if dtensor is not None and isinstance(value, dtensor.DTensor) else value


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The unsharded model and optimizer state dicts on the CPU of rank 0 (every rank must call)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=full), get_optimizer_state_dict(model, optimizer, options=full)


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optimizer_state: dict[str, Any]
) -> None:
    """Load unsharded state dicts (every rank holds them) into the sharded model and optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
