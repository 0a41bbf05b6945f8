"""Where and how a fit runs: device, data workers, checkpoints and speed switches.

None of it changes what is trained, so a run may resume with other values (on another machine,
with another retention); the hyperparameters are :class:`~trainer.TrainConfig`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer._config import MUTABLE_FIELDS, _check


@dataclass(frozen=True)
class Infra:
    """How and where to fit: every field may differ between a run and its resumption."""

    checkpoint_dir: Path | None = None
    """Where to write one checkpoint per epoch; ``None`` writes none."""
    keep_last: int = 2
    """How many most recent epoch checkpoints to keep (the best by validation loss is always kept)."""
    checkpoint_every: float = 0.0
    """Seconds of training a killed run may lose. 0 writes a checkpoint after every epoch. Above 0,
    one is written after an epoch when the next epoch would end more than this after the last
    checkpoint (the start of the fit, at first), so every epoch once epochs take this long, and
    after the last epoch (see ``checkpoint_last``): a run of many short epochs saves every
    ``checkpoint_every`` seconds, not every epoch. ``best.pt`` is then not kept (its epoch may
    never have been saved)."""
    checkpoint_last: bool = True
    """With ``checkpoint_every`` above 0, always write a checkpoint after the last epoch (the run's
    final state, to resume from or to read). ``False`` treats the last epoch as any other: for a
    caller that deletes a finished run's checkpoints unread (a search's trials), which then saves
    that write; a run killed after its last epoch loses at most ``checkpoint_every`` seconds, as one
    killed earlier. No effect when ``checkpoint_every`` is 0."""
    checkpoint_at: frozenset[int] = frozenset()
    """Epochs after which a checkpoint is always written, whatever ``checkpoint_every`` says: where
    a caller may stop the run to resume it later (a search's paused trials)."""
    resume: bool = True
    """Resume from the newest good checkpoint in ``checkpoint_dir`` when there is one."""
    init_from: Path | None = None
    """Another run's checkpoint to start from when ``checkpoint_dir`` holds none of this run's own
    to resume (population-based training's exploit step): a checkpoint file, or a run's checkpoint
    directory (its newest usable checkpoint). Weights, optimizer, schedule, epoch and step counters
    and RNG states are taken as it has them, so the fit goes on after its epoch; it is copied into
    ``checkpoint_dir`` before the first epoch trains (needs ``checkpoint_dir``), so the source may be
    deleted once a hook or the sink has been called, and a restarted fit resumes from the copy. The
    copy's best epoch is its own. A damaged or missing source is a ``CheckpointError``."""
    mutable: frozenset[str] = frozenset()
    """What a resumed checkpoint (own or ``init_from``'s) may have had otherwise: a subset of
    ``trainer.MUTABLE_FIELDS`` (``lr``, ``weight_decay``, ``dropout``). A change to one is applied after
    the optimizer and schedule are loaded and recorded in ``FitResult.mutations``; a change to any
    other field is still refused."""
    cpu: bool = False
    """Train on CPU even when CUDA is available."""
    num_workers: int = 2
    """DataLoader workers, used only for datasets that are not in-memory tensors."""
    compile: bool = False
    """Compile the model's forward (and so its backward) with ``torch.compile`` for this fit. The
    first step pays the compilation (seconds to minutes); a later fit in the same process of a model
    with the same code and shapes reuses it (a new model still pays a re-trace of about half a second
    in its first epoch). Worth it for long compute-bound trials in bf16: on an H200, a 128-4096x4-10
    MLP at batch 4096 trained 1.26x the uncompiled samples/s after the first epoch (827k against
    655k), and the first compiled fit paid about 7.5 s; in fp32 (TF32) it gained 1.02x. Where the
    host's kernel launches bound the step it loses: at batch 64 on the H200, 0.80x the plain loop's
    samples/s against 0.91x uncompiled (bf16); on a 2-core CPU, 0.88x against 1.07x
    (``bench_trainer.py --compile``, a 128-256x4-10 MLP). The caller's module is left uncompiled."""
    channels_last: bool = False
    """On CUDA, keep the model's 4-D weights (and so its convolutions' activations) channels-last,
    the layout tensor-core convolutions run fastest in. No effect on CPU."""
    cudnn_benchmark: bool = False
    """On CUDA, let cuDNN time its convolution algorithms for each new input shape and keep the
    fastest (worth it when shapes repeat, as fixed-size image batches do). No effect on CPU."""
    tf32: bool = True
    """On CUDA GPUs from Ampere on, run float32 matmuls and convolutions on TF32 tensor cores (about
    8x the float32 rate, 10-bit mantissa products with float32 accumulation). No effect on CPU."""

    def __post_init__(self) -> None:
        _check(self.keep_last >= 1, f"keep_last must be >= 1, got {self.keep_last}")
        _check(
            0 <= self.checkpoint_every < math.inf,
            f"checkpoint_every must be a number of seconds >= 0, got {self.checkpoint_every}",
        )
        _check(self.num_workers >= 0, f"num_workers must be >= 0, got {self.num_workers}")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, Path):
            object.__setattr__(self, "checkpoint_dir", Path(self.checkpoint_dir))
        if self.init_from is not None and not isinstance(self.init_from, Path):
            object.__setattr__(self, "init_from", Path(self.init_from))
        _check(
            self.init_from is None or self.checkpoint_dir is not None,
            "init_from needs a checkpoint_dir: the other run's checkpoint is copied there first",
        )
        names = [self.mutable] if isinstance(self.mutable, str) else self.mutable  # "lr" is not {"l", "r"}
        object.__setattr__(self, "mutable", frozenset(names))
        unknown = sorted(self.mutable - MUTABLE_FIELDS)
        _check(not unknown, f"mutable may name {', '.join(sorted(MUTABLE_FIELDS))}, got {', '.join(unknown)}")

    def replace(self, **changes: Any) -> Infra:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so the dict survives ``torch.load(weights_only=True)`` and JSON."""
        out = dataclasses.asdict(self)
        out["checkpoint_dir"] = None if self.checkpoint_dir is None else str(self.checkpoint_dir)
        out["checkpoint_at"] = sorted(self.checkpoint_at)
        out["init_from"] = None if self.init_from is None else str(self.init_from)
        out["mutable"] = sorted(self.mutable)
        return out
