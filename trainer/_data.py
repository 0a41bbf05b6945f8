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
    depends on the global RNG and a resumed run reads what an uninterrupted one would. An epoch reads
    every row once. Optimizer step ``i`` consumes the contiguous block ``i`` of the permutation,
    however it is split over processes and micro-batches; the last step takes the remainder (fewer
    rows than a full step), split as evenly as it goes into at most ``accum`` micro-batches per
    process. Every process gets the same micro-batch count, which collectives need; with ``world``
    processes, up to ``world - 1`` rows of the last step are read twice so that every process has a
    share. :meth:`layout` says how much each micro-batch weighs in its step's gradient.

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

    def for_rank(self, rank: int) -> IndexPlan:
        """The same plan as process ``rank`` holds."""
        plan = IndexPlan(self.n, self.batch_size, rank=rank, world=self.world, shuffle=self.shuffle,
                         seed=self.seed, accum=self.accum)  # fmt: skip
        plan.set_epoch(self.epoch)
        return plan

    def indices(self) -> Tensor:
        """This process's row indices for the current epoch, in reading order (CPU, int64)."""
        if self.shuffle:
            return self._train_indices()
        return torch.arange(self.rank * self.n // self.world, (self.rank + 1) * self.n // self.world)

    @property
    def step_rows(self) -> int:
        """Rows of one full optimizer step over all processes."""
        return self.batch_size * self.accum * self.world

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per training epoch: the full ones and the remainder's."""
        return math.ceil(self.n / self.step_rows)

    def _tail(self) -> tuple[int, int]:
        """The last step's rows (padded to a multiple of ``world``) and micro-batches per process."""
        rows = self.n % self.step_rows
        if rows == 0:
            return 0, 0
        rows += -rows % self.world
        return rows, math.ceil(rows / (self.world * self.batch_size))

    def layout(self) -> list[MicroBatch]:
        """This process's micro-batches of a training epoch, in order (the same every epoch)."""
        full = self.n // self.step_rows
        out = [MicroBatch(self.batch_size, 1 / self.accum, (i + 1) % self.accum == 0) for i in range(full * self.accum)]
        rows, micro = self._tail()
        for i, size in enumerate(_split_sizes(rows, micro * self.world)[self.rank :: self.world]):
            out.append(MicroBatch(size, self.world * size / rows, i == micro - 1))
        return out

    def _train_indices(self) -> Tensor:
        generator = torch.Generator().manual_seed((self.seed * _SEED_MIX + self.epoch) % 2**63)
        order = torch.randperm(self.n, generator=generator)
        full = self.n // self.step_rows
        head = order[: full * self.step_rows].view(full * self.accum, self.world, self.batch_size)
        parts = [head[:, self.rank].reshape(-1)]
        rows, micro = self._tail()
        if rows:
            tail = torch.cat([order[full * self.step_rows :], order[: rows - self.n % self.step_rows]])
            parts += list(tail.tensor_split(micro * self.world)[self.rank :: self.world])
        return torch.cat(parts)

    def sizes(self) -> list[int]:
        """Rows of each of this process's batches in the current epoch."""
        if self.shuffle:
            return [m.rows for m in self.layout()]
        rows = (self.rank + 1) * self.n // self.world - self.rank * self.n // self.world
        return [min(self.batch_size, rows - start) for start in range(0, rows, self.batch_size)]

    def __len__(self) -> int:
        return len(self.sizes())

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.indices().split(self.sizes()):
            yield batch.tolist()


@dataclass(frozen=True)
class MicroBatch:
    """One process's share of an optimizer step: its rows, the factor its mean loss is scaled by
    so the step's gradient is the mean over all the step's rows, and whether it ends the step."""

    rows: int
    weight: float
    ends_step: bool


def _split_sizes(rows: int, parts: int) -> list[int]:
    """The sizes ``Tensor.tensor_split`` cuts ``rows`` into: the first ``rows % parts`` one larger."""
    return [rows // parts + (i < rows % parts) for i in range(parts)]


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
        for index in self.plan.indices().to(self.device).split(self.plan.sizes()):
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
