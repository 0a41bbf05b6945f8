"""Checkpoints: exact resume, rotation, damaged files, and what a resume may change."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from trainer_helpers import StopAt, blobs, residual_mlp, same_weights

import trainer

TASK = trainer.Classification(3)


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return residual_mlp(8, 32, 3, blocks=2, dropout=0.2)  # dropout: resume must restore the RNG too


def _config(**changes) -> trainer.TrainConfig:
    return trainer.TrainConfig(epochs=4, batch_size=16, lr=3e-3, warmup_fraction=0.25).replace(**changes)


def _infra(tmp_path: Path | None, **changes) -> trainer.Infra:
    return trainer.Infra(checkpoint_dir=tmp_path, **changes)


def _fit(model, config, infra=None, **kwargs) -> trainer.FitResult:
    return trainer.fit(model, blobs(160), blobs(48, seed=1), TASK, config, infra=infra, **kwargs)


def test_resume_after_a_stop_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = _model(0)
    _fit(uninterrupted, _config())

    first = _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(2)])
    assert first.epochs_run == 2
    resumed_model = _model(123)  # the checkpoint, not the initialisation, must decide the weights
    resumed = _fit(resumed_model, _config(), _infra(tmp_path))
    assert resumed.resumed_from_epoch == 2
    assert [h["epoch"] for h in resumed.history] == [3, 4]
    assert same_weights(resumed_model, uninterrupted)


def test_keeps_the_last_epochs_and_the_best(tmp_path: Path) -> None:
    result = _fit(_model(0), _config(), _infra(tmp_path, keep_last=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch-0003.pt", "epoch-0004.pt"]
    best = trainer.load_checkpoint(tmp_path / "best.pt")
    assert best["epoch"] == result.best_epoch
    assert best["val_loss"] == pytest.approx(result.best_val_loss)
    assert result.best_checkpoint == tmp_path / "best.pt"
    state = torch.load(tmp_path / "epoch-0004.pt", weights_only=True)
    assert {"model", "optimizer", "scheduler", "rng", "epoch", "global_step", "config", "infra"} <= set(state)
    assert state["config"] == _config().to_dict() and state["global_step"] == 4 * 10
    assert state["infra"] == _infra(tmp_path, keep_last=2).to_dict()


def test_truncated_checkpoint_is_skipped_for_the_previous_one(tmp_path: Path) -> None:
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(3)])
    newest = tmp_path / "epoch-0003.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.raises(trainer.CheckpointError, match="truncated"):
        trainer.load_checkpoint(newest)
    with pytest.warns(RuntimeWarning, match="epoch-0003.pt"):
        result = _fit(_model(0), _config(), _infra(tmp_path))
    assert result.resumed_from_epoch == 2
    assert [h["epoch"] for h in result.history] == [3, 4]


def test_only_damaged_checkpoints_mean_a_fresh_start(tmp_path: Path) -> None:
    _fit(_model(0), _config(epochs=2), _infra(tmp_path, keep_last=1))
    (tmp_path / "epoch-0002.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(RuntimeWarning, match="skipping checkpoint"):
        result = _fit(_model(0), _config(epochs=1), _infra(tmp_path))
    assert result.resumed_from_epoch == 0 and result.epochs_run == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch-0001.pt"]


def test_a_checkpoint_lacking_keys_is_skipped_for_the_previous_one(tmp_path: Path) -> None:
    """It loads, but a resume would fail on it (``KeyError: 'config'``): the older one is used instead."""
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(3)])
    newest = tmp_path / "epoch-0003.pt"
    state = torch.load(newest, weights_only=True)
    del state["config"], state["optimizer"]
    torch.save(state, newest)
    with pytest.warns(RuntimeWarning, match="epoch-0003.pt lacks optimizer, config"):
        result = _fit(_model(0), _config(), _infra(tmp_path))
    assert result.resumed_from_epoch == 2
    assert [h["epoch"] for h in result.history] == [3, 4]


def test_no_usable_checkpoint_starts_over_with_a_warning(tmp_path: Path) -> None:
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(3)])
    (tmp_path / "epoch-0002.pt").write_bytes(b"garbage")
    state = torch.load(tmp_path / "epoch-0003.pt", weights_only=True)
    torch.save({"model": state["model"], "epoch": 3}, tmp_path / "epoch-0003.pt")
    with pytest.warns(RuntimeWarning) as warned:
        result = _fit(_model(0), _config(), _infra(tmp_path))
    assert any("no usable checkpoint" in str(w.message) and "starting over" in str(w.message) for w in warned)
    assert result.resumed_from_epoch == 0 and result.epochs_run == 4


def test_a_checkpoint_with_a_wrong_value_is_a_checkpoint_error(tmp_path: Path) -> None:
    """Keys present but a value not what was written: a CheckpointError (a caller may start over), not a TypeError."""
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(2)])
    for path in tmp_path.glob("epoch-*.pt"):
        state = torch.load(path, weights_only=True)
        state["scheduler"] = "not a state dict"
        torch.save(state, path)
    with pytest.raises(trainer.CheckpointError, match="damaged"):
        _fit(_model(0), _config(), _infra(tmp_path))


def test_resume_false_starts_over(tmp_path: Path) -> None:
    _fit(_model(0), _config(epochs=2), _infra(tmp_path))
    result = _fit(_model(0), _config(epochs=1), _infra(tmp_path, resume=False))
    assert result.resumed_from_epoch == 0
    assert trainer.load_checkpoint(tmp_path / "best.pt")["epoch"] == 1


def test_load_model_weights_restores_the_trained_model(tmp_path: Path) -> None:
    trained = _model(0)
    _fit(trained, _config(epochs=1), _infra(tmp_path))
    restored = trainer.load_model_weights(_model(1), tmp_path / "epoch-0001.pt")
    assert same_weights(restored, trained)
    with pytest.raises(trainer.CheckpointError, match="does not match"):
        trainer.load_model_weights(residual_mlp(8, 16, 3), tmp_path / "epoch-0001.pt")
    with pytest.raises(trainer.CheckpointError, match="no checkpoint"):
        trainer.load_checkpoint(tmp_path / "missing.pt")


# One other value for every TrainConfig field: each is a hyperparameter, so each is refused.
CHANGED_HYPERPARAMETERS = {
    "epochs": 6,  # the schedule's length depends on it: a changed one would bend the learning rate mid-run
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.1,
    "betas": (0.8, 0.99),
    "warmup_fraction": 0.5,
    "grad_accum_steps": 2,
    "max_grad_norm": None,
    "mixed_precision": "bf16",
    "seed": 1,
    "sharding": "fsdp",  # ignored by a single-process fit, but not by its resumption
}


def test_resume_refuses_a_change_to_any_hyperparameter(tmp_path: Path) -> None:
    # Before, a changed lr or weight decay was warned about and then silently replaced by the
    # checkpoint's optimizer state, and a changed epochs bent the schedule mid-run.
    assert set(CHANGED_HYPERPARAMETERS) == {f.name for f in dataclasses.fields(trainer.TrainConfig)}
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(2)])
    for name, value in CHANGED_HYPERPARAMETERS.items():
        with pytest.raises(trainer.CheckpointError, match=f"cannot resume from epoch 2 .*{name}=") as caught:
            _fit(_model(0), _config(**{name: value}), _infra(tmp_path))
        assert "\n" not in str(caught.value) and "resume=False" in str(caught.value), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch-0001.pt", "epoch-0002.pt"]


def test_resume_with_all_infrastructure_changed_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    """Checkpoints moved to another directory, another retention, checkpoint interval, worker count,
    speed switches and resume policy: the run resumes and ends where an uninterrupted one does."""
    uninterrupted = _model(0)
    _fit(uninterrupted, _config(), trainer.Infra(cpu=True))
    # A first attempt may say resume=False (and checkpoint_last=False, no effect with every epoch saved).
    first = _infra(tmp_path / "first", resume=False, cpu=True, checkpoint_last=False)
    _fit(_model(0), _config(), first, hooks=[StopAt(2)])
    shutil.copytree(tmp_path / "first", tmp_path / "moved")
    cuda = torch.cuda.is_available()  # cpu=False trains on a GPU there: the same weights need cpu=True
    moved = first.replace(
        checkpoint_dir=tmp_path / "moved", keep_last=3, checkpoint_every=3600.0, resume=True, cpu=cuda,
        num_workers=0, channels_last=True, cudnn_benchmark=True, tf32=False, checkpoint_last=True,
        init_from=tmp_path / "first", mutable={"lr"},  # no effect: it has a checkpoint of its own, lr as it was
        checkpoint_at=frozenset({5}),
    )  # fmt: skip
    changed = {k for k, v in moved.to_dict().items() if v != first.to_dict()[k]}
    every = {f.name for f in dataclasses.fields(trainer.Infra)}
    assert changed == every - {"compile"} - ({"cpu"} if cuda else set())  # compile: below, it is not exact
    resumed_model = _model(123)
    resumed = _fit(resumed_model, _config(), moved)
    assert resumed.resumed_from_epoch == 2 and [h["epoch"] for h in resumed.history] == [3, 4]
    assert same_weights(resumed_model, uninterrupted)
    assert trainer.load_checkpoint(tmp_path / "moved" / "epoch-0004.pt")["infra"] == moved.to_dict()
    again = _fit(_model(0), _config(), moved.replace(compile=True))  # nothing left to train, nothing compiled
    assert again.resumed_from_epoch == 4 and again.history == []
    assert again.final_metrics == pytest.approx(resumed.history[-1], nan_ok=True)  # the checkpointed epoch's
    assert sorted(resumed.resumed_curve) == [1, 2] and sorted(again.resumed_curve) == [1, 2, 3, 4]  # every epoch's
    assert all(again.resumed_curve[h["epoch"]] == pytest.approx(h, nan_ok=True) for h in resumed.history)


def test_a_checkpoint_with_the_old_all_in_one_config_resumes(tmp_path: Path) -> None:
    """Checkpoints written before the split hold the infrastructure inside ``config`` and no ``infra``:
    only the keys TrainConfig has are compared, so they resume, and still refuse another lr."""
    uninterrupted = _model(0)
    _fit(uninterrupted, _config())
    _fit(_model(0), _config(), _infra(tmp_path), hooks=[StopAt(2)])
    old_infra = {"checkpoint_dir": "/elsewhere", "keep_last": 5, "checkpoint_every": 30.0, "resume": True,
                 "cpu": True, "num_workers": 4, "compile": True, "channels_last": True, "cudnn_benchmark": True,
                 "tf32": False}  # fmt: skip
    for path in tmp_path.glob("epoch-*.pt"):
        state = torch.load(path, weights_only=True)
        del state["infra"]
        state["config"] = {**state["config"], **old_infra}
        torch.save(state, path)
    with pytest.raises(trainer.CheckpointError, match="lr=0.003 \\(now 0.001\\)"):
        _fit(_model(0), _config(lr=1e-3), _infra(tmp_path))
    resumed_model = _model(123)
    resumed = _fit(resumed_model, _config(), _infra(tmp_path))
    assert resumed.resumed_from_epoch == 2 and same_weights(resumed_model, uninterrupted)


@pytest.mark.parametrize("last", [True, False], ids=["last-always", "last-as-any"])
def test_checkpoint_every_saves_short_epochs_by_time_and_always_the_last(tmp_path: Path, last: bool) -> None:
    """Epochs of ~60 ms with a 0.25 s bound: a checkpoint every few epochs, never more than the bound
    plus one epoch of training behind, the last epoch always (or with ``checkpoint_last=False`` only
    when the bound asks for it), no best.pt; resuming from one is exact."""
    import time

    ends: dict[int, float] = {}

    def slow_step() -> None:  # ten optimizer steps an epoch: ~60 ms epochs on any machine
        time.sleep(0.006)

    def mark(epoch: int, metrics) -> bool:
        ends[epoch] = time.perf_counter()
        return False

    config = _config(epochs=16)
    infra = _infra(tmp_path, keep_last=100, checkpoint_every=0.25, checkpoint_last=last)
    result = _fit(_model(0), config, infra, hooks=[mark], on_step=slow_step)
    assert sorted(ends) == list(range(1, 17))
    saved = sorted(int(p.stem.removeprefix("epoch-")) for p in tmp_path.glob("epoch-*.pt"))
    assert (saved[-1] == 16) if last else (saved[-1] <= 16), saved
    # A save after epoch e needs its wall time since the last save plus epoch e's own >= 0.25 s, so each
    # of epochs 2-15 saved took 0.125 s or more. Under heavy load epochs can: then all may be saved.
    stretched = ends[15] - ends[1] >= 14 * 0.125
    assert len(saved) >= 2 and (stretched or len(saved) < 16), (saved, ends[15] - ends[1])
    assert not (tmp_path / "best.pt").exists() and result.best_checkpoint is None
    took = {h["epoch"]: h["epoch_seconds"] for h in result.history}
    for epoch in range(1, 17):  # a kill at the end of `epoch` loses the training since the last save before it
        last = max((s for s in saved if s < epoch), default=0)
        # Training lost: the epochs since that save. (Not the wall clock: on a loaded machine the
        # process can stall between two epochs, which no rule can foresee; the rule counts such a
        # stall, so it only ever saves sooner for it.)
        lost = sum(took[e] for e in range(last + 1, epoch + 1))
        # The rule looks one epoch ahead with the last epoch's length: the bound holds up to the
        # difference between two consecutive epochs, and one epoch always.
        allowed = max(0.25 + took[epoch] - took.get(epoch - 1, took[epoch]), took[epoch])
        assert lost <= allowed + 0.01, (epoch, last, lost, allowed)
    # The saved state resumes exactly, as an every-epoch checkpoint does.
    uninterrupted = _model(0)
    _fit(uninterrupted, config)
    for path in tmp_path.glob("epoch-*.pt"):
        if int(path.stem.removeprefix("epoch-")) > saved[0]:
            path.unlink()
    resumed_model = _model(123)
    resumed = _fit(resumed_model, config, infra)
    assert resumed.resumed_from_epoch == saved[0]
    assert same_weights(resumed_model, uninterrupted)


def test_infra_validates_itself_and_is_no_part_of_the_config() -> None:
    with pytest.raises(trainer.ConfigError, match="checkpoint_every"):
        trainer.Infra(checkpoint_every=-1)
    with pytest.raises(trainer.ConfigError, match="keep_last"):
        trainer.Infra(keep_last=0)
    with pytest.raises(trainer.ConfigError, match="num_workers"):
        trainer.Infra().replace(num_workers=-1)
    infra = trainer.Infra(checkpoint_dir="runs/a")  # type: ignore[arg-type]
    assert infra.checkpoint_dir == Path("runs/a") and infra.to_dict()["checkpoint_dir"] == "runs/a"
    with pytest.raises(TypeError, match="checkpoint_dir"):
        trainer.TrainConfig(epochs=1, checkpoint_dir="runs/a")  # type: ignore[call-arg]


def test_a_checkpoint_listener_hears_of_each_checkpoint_before_its_epochs_hooks(tmp_path: Path) -> None:
    events: list[tuple[str, int]] = []

    class Listener:
        def __init__(self, folder: Path | None = None) -> None:
            self.folder = folder

        def checkpoint_saved(self, epoch: int) -> None:
            assert self.folder is not None and any(self.folder.glob("epoch-*.pt"))  # written before it is announced
            events.append(("saved", epoch))

        def __call__(self, epoch: int, metrics) -> bool:
            events.append(("epoch", epoch))
            return False

    assert isinstance(Listener(), trainer.CheckpointListener)
    _fit(_model(0), _config(epochs=3), _infra(tmp_path), hooks=[Listener(tmp_path)])
    assert events == [(kind, e) for e in (1, 2, 3) for kind in ("saved", "epoch")]
    events.clear()
    hourly = tmp_path / "hourly"
    _fit(_model(0), _config(epochs=3), _infra(hourly, checkpoint_every=3600), hooks=[Listener(hourly)])
    assert events == [("epoch", 1), ("epoch", 2), ("saved", 3), ("epoch", 3)]  # only the last epoch's was due
    events.clear()
    unread = tmp_path / "unread"  # a caller that deletes a finished run's checkpoints: none was due
    _fit(_model(0), _config(epochs=3), _infra(unread, checkpoint_every=3600, checkpoint_last=False),
         hooks=[Listener(unread)])  # fmt: skip
    assert events == [("epoch", 1), ("epoch", 2), ("epoch", 3)] and not any(unread.glob("epoch-*.pt"))
    events.clear()
    _fit(_model(0), _config(epochs=3), _infra(unread, checkpoint_last=False), hooks=[Listener(unread)])
    assert events == [(kind, e) for e in (1, 2, 3) for kind in ("saved", "epoch")]  # every epoch: no effect
    events.clear()
    _fit(_model(0), _config(epochs=3), None, hooks=[Listener()])
    assert events == [("epoch", 1), ("epoch", 2), ("epoch", 3)]


def test_checkpoint_at_writes_those_epochs_whatever_checkpoint_every_says(tmp_path):
    """A caller that will stop a run at an epoch (a search's paused trial) gets a checkpoint there,
    though its checkpoint_every leaves every other epoch unsaved."""
    infra = trainer.Infra(cpu=True, checkpoint_dir=tmp_path, checkpoint_every=3600.0, checkpoint_last=False,
                          keep_last=5, checkpoint_at=frozenset({2, 3}))  # fmt: skip
    _fit(_model(0), _config(), infra)
    assert sorted(p.name for p in tmp_path.glob("epoch-*.pt")) == ["epoch-0002.pt", "epoch-0003.pt"]
