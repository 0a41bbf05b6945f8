"""Batching and sharding: what each process reads in each epoch."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.data import Dataset
from trainer_helpers import blobs, residual_mlp, same_weights

import trainer
from trainer._data import IndexPlan


def _train_shards(n: int, world: int, **kwargs) -> list[torch.Tensor]:
    plans = [IndexPlan(n, 8, rank=r, world=world, shuffle=True, seed=3, **kwargs) for r in range(world)]
    for plan in plans:
        plan.set_epoch(2)
    return [plan.indices() for plan in plans]


def test_training_shards_are_disjoint_equal_and_whole_steps() -> None:
    shards = _train_shards(203, world=3, accum=2)
    assert {len(s) for s in shards} == {8 * 2 * 4}  # 203 // (8*2*3) = 4 optimizer steps
    together = torch.cat(shards)
    assert len(together.unique()) == len(together)
    assert len(IndexPlan(203, 8, rank=1, world=3, shuffle=True, accum=2)) == 8


def test_an_optimizer_step_reads_the_same_rows_however_it_is_split() -> None:
    one = _train_shards(256, world=1, accum=4)[0].view(-1, 32)  # 8 rows x 4 micro-batches per step
    two = torch.stack(_train_shards(256, world=2, accum=2), dim=1).view(-1, 32)
    assert torch.equal(one.sort(dim=1).values, two.sort(dim=1).values)


def test_shuffle_depends_on_seed_and_epoch_not_on_the_global_rng() -> None:
    plan = IndexPlan(100, 10, shuffle=True, seed=7)
    plan.set_epoch(1)
    torch.manual_seed(0)
    first = plan.indices()
    torch.manual_seed(1)
    assert torch.equal(plan.indices(), first)
    plan.set_epoch(2)
    assert not torch.equal(plan.indices(), first)


def test_tiny_data_is_cycled_to_one_full_step() -> None:
    plan = IndexPlan(5, 4, shuffle=True, accum=2)
    indices = plan.indices().tolist()
    assert len(plan) == 2 and len(indices) == 8 and set(indices) == {0, 1, 2, 3, 4}


def test_validation_shards_cover_every_row_once_without_padding() -> None:
    plans = [IndexPlan(101, 10, rank=r, world=2) for r in range(2)]
    rows = [i for plan in plans for batch in plan for i in batch]
    assert rows == list(range(101))
    assert [len(p) for p in plans] == [5, 6]


def test_tensor_data_subset_and_validation() -> None:
    data = blobs(10)
    part = data.subset([1, 3])
    assert len(part) == 2 and torch.equal(part.x[1], data.x[3])
    with pytest.raises(ValueError, match="rows"):
        trainer.TensorData(torch.zeros(3, 2), torch.zeros(4))


class _Pairs(Dataset):
    """The same rows as a TensorData, served one sample at a time."""

    def __init__(self, data: trainer.TensorData) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        return self.data.x[index], self.data.y[index]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_trains_exactly_like_tensor_data(workers: int) -> None:
    torch.manual_seed(0)
    from_tensors = residual_mlp(8, 16, 3, dropout=0.1)
    from_dataset = copy.deepcopy(from_tensors)
    train, val = blobs(192), blobs(48, seed=1)
    config = trainer.TrainConfig(epochs=2, batch_size=16, num_workers=workers)
    a = trainer.fit(from_tensors, train, val, trainer.Classification(3), config)
    b = trainer.fit(from_dataset, _Pairs(train), _Pairs(val), trainer.Classification(3), config)
    assert same_weights(from_tensors, from_dataset)
    assert a.history[-1]["val_loss"] == pytest.approx(b.history[-1]["val_loss"])
