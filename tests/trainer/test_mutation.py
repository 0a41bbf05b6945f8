"""Population-based training's groundwork: a resume that changes lr, weight decay or dropout, and a
fit that starts from another run's checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from trainer_helpers import StopAt, blobs, residual_mlp, same_weights

import trainer
from trainer._optim import lr_factor

TASK = trainer.Classification(3)
STEPS = 10
"""Optimizer steps an epoch: 160 rows in batches of 16."""


def _model(seed: int = 0, dropout: float = 0.2, width: int = 32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return residual_mlp(8, width, 3, blocks=2, dropout=dropout)


def _config(**changes) -> trainer.TrainConfig:
    return trainer.TrainConfig(epochs=4, batch_size=16, lr=3e-3, warmup_fraction=0.25).replace(**changes)


def _fit(model, config, infra=None, **kwargs) -> trainer.FitResult:
    return trainer.fit(model, blobs(160), blobs(48, seed=1), TASK, config, infra=infra, **kwargs)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize(("warmup", "stop"), [(0.5, 1), (0.25, 2)], ids=["in-warmup", "in-cosine"])
def test_a_resume_with_another_lr_and_weight_decay_goes_on_from_the_new_base(
    tmp_path: Path, warmup: float, stop: int
) -> None:
    _fit(_model(), _config(warmup_fraction=warmup), trainer.Infra(checkpoint_dir=tmp_path), hooks=[StopAt(stop)])
    config = _config(warmup_fraction=warmup, lr=1e-3, weight_decay=0.05)
    infra = trainer.Infra(checkpoint_dir=tmp_path, mutable={"lr", "weight_decay"})
    result = _fit(_model(), config, infra, hooks=[StopAt(stop + 1)])

    assert result.resumed_from_epoch == stop
    assert set(result.mutations) == {
        trainer.Mutation(stop, "lr", 3e-3, 1e-3),
        trainer.Mutation(stop, "weight_decay", 0.0, 0.05),
    }
    warmup_steps, total = round(warmup * 4 * STEPS), 4 * STEPS
    # The rate of the first epoch after the change's last step: the new base times the schedule's
    # factor at that step, the schedule neither restarted nor stretched.
    last_step = (stop + 1) * STEPS - 1
    assert result.history[0]["lr"] == pytest.approx(1e-3 * lr_factor(last_step, warmup=warmup_steps, total=total))
    saved = trainer.load_checkpoint(tmp_path / f"epoch-{stop + 1:04d}.pt")
    group = saved["optimizer"]["param_groups"][0]
    assert group["lr"] == pytest.approx(1e-3 * lr_factor(last_step + 1, warmup=warmup_steps, total=total))
    assert group["initial_lr"] == 1e-3 and group["weight_decay"] == 0.05
    assert saved["scheduler"]["base_lrs"] == [1e-3] and saved["global_step"] == (stop + 1) * STEPS
    assert saved["config"] == config.to_dict()


def test_the_changed_lr_is_what_trains(tmp_path: Path) -> None:
    """After the change the run trains as one whose checkpoint held the new lr all along (edited by
    hand here), and not as one that kept the old lr."""
    _fit(_model(), _config(), trainer.Infra(checkpoint_dir=tmp_path / "changed"), hooks=[StopAt(2)])
    shutil.copytree(tmp_path / "changed", tmp_path / "edited")
    shutil.copytree(tmp_path / "changed", tmp_path / "unchanged")
    for path in (tmp_path / "edited").glob("epoch-*.pt"):
        state = torch.load(path, weights_only=True)
        state["config"]["lr"] = 1e-3
        state["scheduler"]["base_lrs"] = [1e-3]
        step = state["scheduler"]["last_epoch"]
        for group in state["optimizer"]["param_groups"]:
            group["initial_lr"], group["lr"] = 1e-3, 1e-3 * lr_factor(step, warmup=STEPS, total=4 * STEPS)
        torch.save(state, path)
    changed, edited, unchanged = _model(5), _model(6), _model(7)
    _fit(changed, _config(lr=1e-3), trainer.Infra(checkpoint_dir=tmp_path / "changed", mutable={"lr"}))
    _fit(edited, _config(lr=1e-3), trainer.Infra(checkpoint_dir=tmp_path / "edited"))
    _fit(unchanged, _config(), trainer.Infra(checkpoint_dir=tmp_path / "unchanged"))
    assert same_weights(changed, edited)
    assert not same_weights(changed, unchanged)


def test_a_resume_with_another_dropout_keeps_the_models_rate(tmp_path: Path) -> None:
    _fit(_model(dropout=0.2), _config(), trainer.Infra(checkpoint_dir=tmp_path), hooks=[StopAt(2)])
    with pytest.raises(trainer.CheckpointError, match=r"dropout=0.2 \(now 0.5\); Infra.mutable lets only lr change;"):
        _fit(_model(dropout=0.5), _config(), trainer.Infra(checkpoint_dir=tmp_path, mutable={"lr"}))
    model = _model(dropout=0.5)
    result = _fit(model, _config(), trainer.Infra(checkpoint_dir=tmp_path, mutable={"dropout"}), hooks=[StopAt(3)])
    assert result.mutations == (trainer.Mutation(2, "dropout", 0.2, 0.5),)
    assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.5, 0.5]
    assert set(trainer.load_checkpoint(tmp_path / "epoch-0003.pt")["dropout"].values()) == {0.5}
    # The change is in the checkpoint's lineage, and the next resume (at the new rate) changes nothing.
    again = _fit(_model(dropout=0.5), _config(), trainer.Infra(checkpoint_dir=tmp_path))
    assert again.resumed_from_epoch == 3 and again.mutations == result.mutations


def test_dropout_modules_of_different_rates_are_named(tmp_path: Path) -> None:
    _fit(_model(dropout=0.2), _config(), trainer.Infra(checkpoint_dir=tmp_path), hooks=[StopAt(1)])
    model = _model(dropout=0.2)
    model[2].body[3].p = 0.4  # the second block's dropout only
    result = _fit(model, _config(), trainer.Infra(checkpoint_dir=tmp_path, mutable={"dropout"}), hooks=[StopAt(2)])
    assert result.mutations == (trainer.Mutation(1, "dropout:2.body.3", 0.2, 0.4),)


@pytest.mark.parametrize(
    ("model", "config", "refusal"),
    [
        (lambda: _model(), _config(batch_size=32, lr=1e-3), r"batch_size=16 \(now 32\);"),
        (lambda: _model(), _config(epochs=6), r"epochs=4 \(now 6\);"),
        (lambda: _model(width=64), _config(), "size mismatch"),
    ],
    ids=["batch-size", "epochs", "model-width"],
)
def test_any_other_change_is_still_refused_and_changes_nothing(tmp_path: Path, model, config, refusal) -> None:
    _fit(_model(), _config(), trainer.Infra(checkpoint_dir=tmp_path / "run"), hooks=[StopAt(2)])
    before = _files(tmp_path / "run")
    every = frozenset(trainer.MUTABLE_FIELDS)
    with pytest.raises(trainer.CheckpointError, match=refusal):
        _fit(model(), config, trainer.Infra(checkpoint_dir=tmp_path / "run", mutable=every))
    child = trainer.Infra(checkpoint_dir=tmp_path / "child", init_from=tmp_path / "run", mutable=every)
    with pytest.raises(trainer.CheckpointError, match=refusal) as refused:
        _fit(model(), config, child)
    assert f"epoch 2 in {tmp_path / 'run'}:" in str(refused.value)  # the source, not the empty child
    if "mismatch" not in refusal:  # starting over must also leave the source out, or it is refused again
        assert str(refused.value).endswith("start over with Infra(resume=False, init_from=None)")
    assert _files(tmp_path / "run") == before
    assert list((tmp_path / "child").iterdir()) == []


@pytest.mark.parametrize("source", ["directory", "file"])
def test_a_fit_from_another_runs_checkpoint_goes_on_at_its_epoch(tmp_path: Path, source: str) -> None:
    uninterrupted = _model()
    _fit(uninterrupted, _config())
    parent = tmp_path / "parent"
    _fit(_model(), _config(), trainer.Infra(checkpoint_dir=parent), hooks=[StopAt(2)])
    before = _files(parent)
    child = _model(123)  # the checkpoint, not the initialisation, decides the weights
    init_from = parent if source == "directory" else parent / "epoch-0002.pt"
    result = _fit(child, _config(), trainer.Infra(checkpoint_dir=tmp_path / "child", init_from=init_from))
    assert result.resumed_from_epoch == 2 and [h["epoch"] for h in result.history] == [3, 4]
    assert result.mutations == ()
    assert same_weights(child, uninterrupted)  # weights, optimizer, schedule, step counter and RNG taken
    assert _files(parent) == before
    assert {"epoch-0003.pt", "epoch-0004.pt"} <= set(_files(tmp_path / "child"))


def test_the_copy_lets_the_source_go_before_the_first_epoch_ends(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    _fit(_model(), _config(), trainer.Infra(checkpoint_dir=parent), hooks=[StopAt(2)])
    infra = trainer.Infra(checkpoint_dir=tmp_path / "child", init_from=parent, mutable={"lr"})

    def crash() -> None:
        raise KeyboardInterrupt  # killed in its first step, before any checkpoint of its own

    with pytest.raises(KeyboardInterrupt):
        _fit(_model(), _config(lr=1e-3), infra, on_step=crash)
    assert sorted(p.name for p in (tmp_path / "child").iterdir()) == ["best.pt", "epoch-0002.pt"]
    shutil.rmtree(parent)
    result = _fit(_model(), _config(lr=1e-3), infra)
    assert result.resumed_from_epoch == 2 and [h["epoch"] for h in result.history] == [3, 4]
    assert result.mutations == (trainer.Mutation(2, "lr", 3e-3, 1e-3, source=str(parent)),)


def test_the_lineage_goes_from_checkpoint_to_checkpoint(tmp_path: Path) -> None:
    parent, child, grandchild = tmp_path / "parent", tmp_path / "child", tmp_path / "grandchild"
    _fit(_model(), _config(), trainer.Infra(checkpoint_dir=parent), hooks=[StopAt(1)])
    every = trainer.MUTABLE_FIELDS
    _fit(_model(), _config(lr=1e-3), trainer.Infra(checkpoint_dir=child, init_from=parent, mutable=every),
         hooks=[StopAt(3)])  # fmt: skip
    result = _fit(
        _model(dropout=0.1),
        _config(lr=1e-3, weight_decay=0.01),
        trainer.Infra(checkpoint_dir=grandchild, init_from=child, mutable=every),
    )
    assert result.mutations == (
        trainer.Mutation(1, "lr", 3e-3, 1e-3, source=str(parent)),
        trainer.Mutation(3, "weight_decay", 0.0, 0.01, source=str(child)),
        trainer.Mutation(3, "dropout", 0.2, 0.1, source=str(child)),
    )
    assert len(trainer.load_checkpoint(grandchild / "epoch-0004.pt")["mutations"]) == 3


def test_a_source_without_a_usable_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for source in (tmp_path / "missing.pt", tmp_path / "empty"):
        with pytest.raises(trainer.CheckpointError, match=str(source)):
            _fit(_model(), _config(), trainer.Infra(checkpoint_dir=tmp_path / "child", init_from=source))


def test_infra_checks_what_may_change_and_where_a_copy_goes() -> None:
    with pytest.raises(trainer.ConfigError, match="mutable may name dropout, lr, weight_decay, got batch_size"):
        trainer.Infra(mutable={"lr", "batch_size"})
    with pytest.raises(trainer.ConfigError, match="init_from needs a checkpoint_dir"):
        trainer.Infra(init_from=Path("runs/parent"))
    infra = trainer.Infra(checkpoint_dir=Path("runs/child"), init_from="runs/parent", mutable="lr")  # type: ignore[arg-type]
    assert infra.mutable == frozenset({"lr"}) and infra.init_from == Path("runs/parent")
    assert infra.to_dict()["mutable"] == ["lr"] and infra.to_dict()["init_from"] == "runs/parent"
