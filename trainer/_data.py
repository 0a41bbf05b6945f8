"""Training data: in-memory tensors batched by index, or any map-style Dataset through a DataLoader.

Both kinds go through the same :class:`IndexPlan`, so a ``TensorData`` and a ``Dataset`` holding the
same rows produce the same batches: same shuffle, same shards, same steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import torch
from accelerate.utils import send_to_device
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

_SEED_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant: spreads (seed, epoch) pairs over the seed space


@dataclass(frozen=True, eq=False)
class TensorData:
    """In-memory inputs ``x`` and targets ``y`` with one row per sample.

    The trainer moves both tensors to the training device once and batches them by index, which is
    much cheaper than a per-sample ``__getitem__`` and a collate for every batch.
    """

    x: Tensor
    y: Tensor

    def __post_init__(self) -> None:
        if self.x.dim() == 0 or self.y.dim() == 0:
            raise ValueError("TensorData needs x and y with a leading sample dimension")
        if len(self.x) != len(self.y):
            raise ValueError(f"TensorData x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.x[index], self.y[index]

    def subset(self, indices: Sequence[int] | Tensor) -> TensorData:
        """Rows ``indices`` (any int sequence, array or tensor) as a new ``TensorData``."""
        index = torch.as_tensor(indices, dtype=torch.long, device=self.x.device)
        return TensorData(self.x[index], self.y[index.to(self.y.device)])

    def to(self, device: torch.device | str) -> TensorData:
        """This data on ``device`` (``self`` when it is already there)."""
        device = torch.device(device)
        if self.x.device == device and self.y.device == device:
            return self
        return TensorData(self.x.to(device), self.y.to(device))


TrainData: TypeAlias = TensorData | Dataset
"""What ``fit`` and ``evaluate`` accept; a ``Dataset`` must yield ``(x, y)`` pairs."""


class IndexPlan(Sampler[list[int]]):
    """Which rows one process reads, batch by batch, in one epoch.

    Training (``shuffle=True``): a permutation seeded from ``(seed, epoch)`` only, so the order never
    depends on the global RNG and a resumed run reads what an uninterrupted one would. Every process
    gets the same number of full batches, a multiple of ``accum``; optimizer step ``i`` consumes the
    contiguous block ``i`` of the permutation, however it is split over processes and micro-batches.
    The remainder (fewer rows than one optimizer step) is dropped; a fresh permutation each epoch
    means different rows are dropped. Data smaller than one optimizer step is cycled.

    Evaluation (``shuffle=False``): process ``r`` reads its own contiguous slice, disjoint from the
    others, no padding, so sums over processes count every row exactly once.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        rank: int = 0,
        world: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        accum: int = 1,
    ) -> None:
        if n < 1:
            raise ValueError("cannot batch an empty dataset")
        self.n, self.batch_size, self.rank, self.world = n, batch_size, rank, world
        self.shuffle, self.seed, self.accum = shuffle, seed, accum
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> Tensor:
        """This process's row indices for the current epoch, in reading order (CPU, int64)."""
        if self.shuffle:
            return self._train_indices()
        return torch.arange(self.rank * self.n // self.world, (self.rank + 1) * self.n // self.world)

    def _train_indices(self) -> Tensor:
        step_rows = self.batch_size * self.accum * self.world
        steps = max(1, self.n // step_rows)
        generator = torch.Generator().manual_seed((self.seed * _SEED_MIX + self.epoch) % 2**63)
        order = torch.randperm(self.n, generator=generator)
        order = order.repeat(math.ceil(steps * step_rows / self.n))[: steps * step_rows]
        return order.view(steps * self.accum, self.world, self.batch_size)[:, self.rank].reshape(-1)

    def __len__(self) -> int:
        if self.shuffle:
            return max(1, self.n // (self.batch_size * self.accum * self.world)) * self.accum
        rows = (self.rank + 1) * self.n // self.world - self.rank * self.n // self.world
        return math.ceil(rows / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.indices().split(self.batch_size):
            yield batch.tolist()


class Batches(Protocol):
    """An epoch's ``(x, y)`` batches of one process, already on the training device."""

    def set_epoch(self, epoch: int) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[Any, Any]]: ...


class _TensorBatches:
    def __init__(self, data: TensorData, plan: IndexPlan, device: torch.device) -> None:
        self.data, self.plan, self.device = data.to(device), plan, device

    def set_epoch(self, epoch: int) -> None:
        self.plan.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.plan)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        # One host-to-device copy of the epoch's indices; the batches are device-side gathers.
        x, y = self.data.x, self.data.y
        for index in self.plan.indices().to(self.device).split(self.plan.batch_size):
            yield x.index_select(0, index), y.index_select(0, index)


class _LoaderBatches:
    def __init__(self, data: Dataset, plan: IndexPlan, device: torch.device, workers: int) -> None:
        self.plan, self.device = plan, device
        self.pin = device.type == "cuda"
        self.loader = DataLoader(
            data,
            batch_sampler=plan,
            num_workers=workers,
            pin_memory=self.pin,
            persistent_workers=workers > 0,
            # Worker seeds come from this generator, not the global RNG that dropout uses.
            generator=torch.Generator().manual_seed(plan.seed),
        )

    def set_epoch(self, epoch: int) -> None:
        self.plan.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.plan)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for x, y in self.loader:
            yield send_to_device((x, y), self.device, non_blocking=self.pin)


def make_batches(data: TrainData, plan: IndexPlan, device: torch.device, num_workers: int) -> Batches:
    """Batches of ``data`` read in ``plan`` order on ``device``.

    DataLoader workers are only started when there are at least two batches per worker: for a
    handful of batches their start-up costs more than they save.
    """
    if isinstance(data, TensorData):
        return _TensorBatches(data, plan, device)
    workers = num_workers if len(plan) >= 2 * num_workers else 0
    return _LoaderBatches(data, plan, device, workers)


def dataset_size(data: TrainData) -> int:
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TypeError(f"training data must have a length, got {type(data).__name__}") from exc
