"""The TensorBoard sink: per-epoch scalars and the HParams plugin's session, read back with TensorBoard's reader."""

from __future__ import annotations

import pytest
from trainer_helpers import ListSink, blobs, residual_mlp

import trainer

pytest.importorskip("tensorboard")


def _read(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    return scalars, start.session_start_info, end.session_end_info


def test_a_fit_writes_every_epoch_and_its_hyperparameters(tmp_path):
    from tensorboard.plugins.hparams import api_pb2

    board = trainer.TensorBoardSink(tmp_path / "run", hparams={"lr": 0.01, "width": 16, "betas": (0.9, 0.99)})
    mine = ListSink()
    config = trainer.TrainConfig(epochs=3, batch_size=16, lr=0.01)
    result = trainer.fit(residual_mlp(8, 16, 3), blobs(128), blobs(64, seed=1), trainer.Classification(3), config,
                         sink=trainer.FanOut(mine, board))  # fmt: skip
    board.close("success", {"val_loss": result.final_metrics["val_loss"]})

    scalars, start, end = _read(tmp_path / "run")
    assert [step for step, _ in scalars["val_loss"]] == [1, 2, 3]
    assert [v for _, v in scalars["val_loss"]] == pytest.approx([h["val_loss"] for h in result.history])
    assert {"train_loss", "val_accuracy", "lr", "grad_norm"} <= set(scalars)
    assert "epoch" not in scalars
    assert scalars["final/val_loss"][0][1] == pytest.approx(result.final_metrics["val_loss"])
    assert start.hparams["lr"].number_value == pytest.approx(0.01)
    assert start.hparams["width"].number_value == 16
    assert start.hparams["betas"].string_value == "(0.9, 0.99)"
    assert end.status == api_pb2.STATUS_SUCCESS
    assert [step for step, _ in mine.logged] == [1, 2, 3]  # the other sink got every epoch too


def test_a_sink_that_never_logged_writes_nothing(tmp_path):
    board = trainer.TensorBoardSink(tmp_path / "never", hparams={"lr": 1.0})
    board.close("failure")
    assert not (tmp_path / "never").exists()
