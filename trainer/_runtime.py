"""The Accelerate side: building an ``Accelerator`` for a config and handing the model back after."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, is_initialized
from torch import nn

from trainer._config import TrainConfig
from trainer._errors import ConfigError


def make_accelerator(config: TrainConfig) -> Accelerator:
    """An ``Accelerator`` for ``config``; on CPU when ``config.cpu`` is set or there is no CUDA.

    Raises:
        ConfigError: fp16 was asked for without CUDA (CPU autocast supports bf16 only).
    """
    cpu = config.cpu or not torch.cuda.is_available()
    if config.mixed_precision == "fp16" and cpu:
        raise ConfigError("mixed_precision='fp16' needs a CUDA GPU (--mixed-precision); use 'bf16' or 'no' on CPU")
    _allow_precision_change(config.mixed_precision)
    return Accelerator(
        mixed_precision=config.mixed_precision,
        gradient_accumulation_steps=config.grad_accum_steps,
        cpu=cpu,
    )


def _allow_precision_change(mixed_precision: str) -> None:
    # A worker process fits many trials, which may differ in precision, but AcceleratorState is a
    # process-wide singleton that refuses a second precision. Forget it (the process group, kept in
    # PartialState, survives) so the next Accelerator starts from this config.
    if is_initialized() and AcceleratorState().mixed_precision != mixed_precision:
        AcceleratorState._reset_state()


def release_model(accelerator: Accelerator, prepared: nn.Module) -> nn.Module:
    """The caller's module with Accelerate's wrappers removed, ready for another ``fit`` or export.

    ``prepare`` patches ``forward`` with autocast and marks the module as prepared; both would
    leak into the next ``fit`` (whose precision may differ) and into exported models.
    """
    module = accelerator.unwrap_model(prepared, keep_fp32_wrapper=False)
    module.__dict__.pop("_is_accelerate_prepared", None)
    return module
