"""The Accelerate side: building an ``Accelerator`` for a fit and handing the model back after."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, PartialState, is_initialized
from torch import nn

from trainer._config import TrainConfig
from trainer._errors import ConfigError
from trainer._infra import Infra


def _ask_package_checks_once() -> None:
    """Answer Accelerate's per-step "is ``lomo_optim`` installed?" from one look.

    Accelerate asks it in every ``backward``, ``clip_grad_norm_`` and optimizer step, each time a
    filesystem search through ``importlib.util.find_spec``: about 0.09 ms of CPU a step here, 13%
    of a 32-64-10 MLP's step at batch 32 (0.708 -> 0.614 ms, alternated fits in one process). What
    is installed does not change under a running process, so it is answered once.
    """
    import accelerate.accelerator
    import accelerate.optimizer

    modules = [m for m in (accelerate.accelerator, accelerate.optimizer) if hasattr(m, "is_lomo_available")]
    if not modules or getattr(modules[0].is_lomo_available, "_hpsearch_once", False):
        return
    available = bool(modules[0].is_lomo_available())

    def is_lomo_available() -> bool:
        return available

    is_lomo_available._hpsearch_once = True  # type: ignore[attr-defined]
    for module in modules:
        module.is_lomo_available = is_lomo_available  # type: ignore[attr-defined]


def make_accelerator(config: TrainConfig, infra: Infra) -> Accelerator:
    """An ``Accelerator`` for ``config``'s precision; on CPU when ``infra.cpu`` is set or there is no CUDA.

    Raises:
        ConfigError: fp16 was asked for without CUDA (CPU autocast supports bf16 only).
    """
    cpu = infra.cpu or not torch.cuda.is_available()
    if config.mixed_precision == "fp16" and cpu:
        raise ConfigError("mixed_precision='fp16' needs a CUDA GPU (--mixed-precision); use 'bf16' or 'no' on CPU")
    _forget_other_settings(config.mixed_precision, cpu)
    _ask_package_checks_once()
    if not cpu:  # process-wide switches, set for every fit since trials may differ
        # The long-standing API, which inductor and most code read: setting torch's newer
        # fp32_precision instead makes every reader of the old one raise ("mix of ... APIs").
        torch.set_float32_matmul_precision("high" if infra.tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = infra.tf32
        torch.backends.cudnn.benchmark = infra.cudnn_benchmark
    # Accumulation is fit's own (a step may end early, on the epoch's remainder), so Accelerate
    # must neither divide the loss nor hold back optimizer steps.
    return Accelerator(mixed_precision=config.mixed_precision, gradient_accumulation_steps=1, cpu=cpu)


def _forget_other_settings(mixed_precision: str, cpu: bool) -> None:
    # A worker process fits many trials, which may differ in precision or device, but Accelerate's
    # state is a pair of process-wide singletons: AcceleratorState keeps the first precision, and
    # PartialState the first device, so after one fit with cpu=True every later fit would train on
    # the CPU (and the other way round). Forget what differs so the next Accelerator starts from this
    # config; the device only in a single-process run (PartialState also holds the process group).
    if not is_initialized():
        return
    partial = PartialState()
    on_cpu = partial.device.type == "cpu"
    if on_cpu != cpu and partial.num_processes == 1:
        AcceleratorState._reset_state(reset_partial_state=True)
    elif AcceleratorState().mixed_precision != mixed_precision:
        AcceleratorState._reset_state()


def release_model(accelerator: Accelerator, prepared: nn.Module) -> nn.Module:
    """The caller's module with Accelerate's wrappers removed, ready for another ``fit`` or export.

    ``prepare`` patches ``forward`` with autocast and marks the module as prepared; both would
    leak into the next ``fit`` (whose precision may differ) and into exported models.
    """
    module = accelerator.unwrap_model(prepared, keep_fp32_wrapper=False, keep_torch_compile=False)
    module.__dict__.pop("_is_accelerate_prepared", None)
    return module
