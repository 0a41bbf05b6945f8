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


def test_an_epoch_reads_every_training_row_and_shards_stay_in_step() -> None:
    # 203 rows, 3 processes x 2 micro-batches of 8: 4 full steps of 48 and a last step of the 11
    # left over, padded to 12 so each process reads 4 of them (before, the 11 were dropped).
    shards = _train_shards(203, world=3, accum=2)
    assert {len(s) for s in shards} == {8 * 2 * 4 + 4}
    together = torch.cat(shards)
    assert set(together.tolist()) == set(range(203)) and len(together) == 204
    plans = [IndexPlan(203, 8, rank=r, world=3, shuffle=True, accum=2) for r in range(3)]
    assert {len(p) for p in plans} == {9} and plans[0].optimizer_steps == 5


@pytest.mark.parametrize(("n", "batch", "accum"), [(100, 16, 2), (120, 16, 4), (5, 4, 2), (64, 16, 4), (97, 7, 3)])
def test_one_process_reads_each_row_exactly_once(n: int, batch: int, accum: int) -> None:
    plan = IndexPlan(n, batch, shuffle=True, seed=1, accum=accum)
    plan.set_epoch(3)
    rows = [i for micro in plan for i in micro]
    assert sorted(rows) == list(range(n))
    assert [len(micro) for micro in plan] == plan.sizes() == [m.rows for m in plan.layout()]
    assert max(plan.sizes()) <= batch


@pytest.mark.parametrize(("n", "world", "accum"), [(203, 3, 2), (100, 2, 4), (33, 2, 2), (7, 3, 1)])
def test_micro_batch_weights_make_each_step_a_mean_over_its_rows(n: int, world: int, accum: int) -> None:
    layouts = [IndexPlan(n, 4, rank=r, world=world, shuffle=True, accum=accum).layout() for r in range(world)]
    assert len({len(layout) for layout in layouts}) == 1  # same micro-batch count: collectives line up
    steps: list[list] = [[]]
    for micros in zip(*layouts, strict=True):
        assert len({m.ends_step for m in micros}) == 1  # every process ends a step together
        steps[-1].extend(micros)
        if micros[0].ends_step:
            steps.append([])
    assert steps.pop() == []
    for step in steps:
        rows = sum(m.rows for m in step)
        # The averaged gradient is (1/world) x sum over processes of sum(weight x micro-batch mean):
        # each row counts 1/rows exactly when weight = world x micro rows / step rows.
        for m in step:
            assert m.weight == pytest.approx(world * m.rows / rows)
        assert all(m.rows >= 1 for m in step)


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


def test_data_smaller_than_one_step_is_refused_by_fit() -> None:
    # Before, 5 rows with batch 4 x 2 were silently cycled to 8 rows per step.
    config = trainer.TrainConfig(epochs=1, batch_size=4, grad_accum_steps=2)
    with pytest.raises(trainer.ConfigError, match=r"effective batch \(4 x 2 .* = 8\) exceeds the 5 training rows"):
        trainer.fit(residual_mlp(8, 16, 3), blobs(5), blobs(5), trainer.Classification(3), config)


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
    config, infra = trainer.TrainConfig(epochs=2, batch_size=16), trainer.Infra(num_workers=workers)
    a = trainer.fit(from_tensors, train, val, trainer.Classification(3), config, infra=infra)
    b = trainer.fit(from_dataset, _Pairs(train), _Pairs(val), trainer.Classification(3), config, infra=infra)
    assert same_weights(from_tensors, from_dataset)
    assert a.history[-1]["val_loss"] == pytest.approx(b.history[-1]["val_loss"])
