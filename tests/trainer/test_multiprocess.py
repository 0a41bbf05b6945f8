"""Two CPU processes under ``accelerate launch``: one stop decision, exact sharded validation."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_helpers import blobs, residual_mlp

import trainer

HERE = Path(__file__).resolve().parent


pytestmark = pytest.mark.slow  # every test reads the `reports` of one two-process run (about 13 s)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("multiprocess")
    torch.manual_seed(0)
    model = residual_mlp(8, 16, 3)
    train, val = blobs(160), blobs(101, seed=1)  # 101 rows: shards of 50 and 51, 5 and 6 batches
    torch.save(
        {"model": model.state_dict(), "train_x": train.x, "train_y": train.y, "val_x": val.x, "val_y": val.y},
        tmp / "inputs.pt",
    )
    # `--multi_gpu` picks Accelerate's torchrun launcher, which starts both processes; the script's
    # infra says cpu=True, so they train on CPU over gloo. (`--cpu --num_processes 2` runs
    # Accelerate's simple launcher: one process unless an mpirun hostfile is given.)
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        str(HERE / "multiprocess_fit.py"), str(tmp / "inputs.pt"), str(tmp),
    ]  # fmt: skip
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)]),
    }
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    config = trainer.TrainConfig(epochs=1, batch_size=10)
    single = trainer.evaluate(model, val, trainer.Classification(3), config)
    ranks = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]
    return {"single": single, "ranks": ranks, "checkpoints": tmp / "checkpoints"}


def test_a_hook_on_the_main_process_stops_every_rank_at_the_same_epoch(reports: dict) -> None:
    main, other = reports["ranks"]
    assert main["world"] == other["world"] == 2
    for rank in (main, other):
        assert rank["epochs_run"] == 2 and rank["stopped_epoch"] == 2
        assert rank["epochs_in_history"] == [1, 2]
        assert rank["effective_batch_size"] == 20
    assert main["hook_calls"] == [1, 2] and other["hook_calls"] == []  # hooks run on the main process only
    assert main["weights"] == other["weights"]


def test_sharded_validation_equals_single_process_validation(reports: dict) -> None:
    single = reports["single"]
    for rank in reports["ranks"]:
        assert rank["evaluate"]["val_accuracy"] == single["val_accuracy"]
        assert rank["evaluate"]["val_f1"] == single["val_f1"]
        assert rank["evaluate"]["val_loss"] == pytest.approx(single["val_loss"], rel=1e-6)


def test_ranks_draw_different_dropout_masks(reports: dict) -> None:
    # Before, set_seed gave every rank the same stream: the same units dropped on every shard.
    main, other = reports["ranks"]
    assert len(main["first_dropout_mask"]) == len(other["first_dropout_mask"]) > 0
    assert main["first_dropout_mask"] != other["first_dropout_mask"]


def test_a_two_process_resume_ends_with_the_weights_of_an_uninterrupted_run(reports: dict) -> None:
    for rank in reports["ranks"]:
        assert rank["resumed_from"] == 1
        assert rank["resumed_weights"] == rank["uninterrupted_weights"]


def test_a_checkpoint_of_two_processes_is_refused_by_one(reports: dict) -> None:
    state = trainer.load_checkpoint(reports["checkpoints"] / "epoch-0003.pt")
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    torch.manual_seed(0)
    model = residual_mlp(8, 16, 3, dropout=0.3)
    config = trainer.TrainConfig(epochs=3, batch_size=10)
    infra = trainer.Infra(cpu=True, checkpoint_dir=reports["checkpoints"])
    with pytest.raises(trainer.CheckpointError, match="trained by 2 processes, not 1"):
        trainer.fit(model, blobs(160), blobs(101, seed=1), trainer.Classification(3), config, infra=infra)


def test_a_compiled_two_process_fit_trains_like_an_eager_one(reports: dict) -> None:
    # torch.compile around the DDP wrapper: gradients still synced, checkpoints and validation on
    # the plain module (Accelerate's unwrap would otherwise strip DDP from the compiled model).
    main, other = reports["ranks"]
    assert main["compiled_weights"] == other["compiled_weights"]
    assert main["compiled_weights"] == pytest.approx(main["weights"], rel=1e-4, abs=1e-5)


def test_a_sharded_fsdp_fit_trains_like_ddp(reports: dict) -> None:
    # FSDP2 over gloo: the same rows per step, gradients averaged the same way, validation in
    # lockstep (shards of 50 and 51 rows: 5 and 6 batches); the weights gathered on rank 0.
    main, other = reports["ranks"]
    assert [h["epoch"] for h in main["fsdp_history"]] == [1, 2] == [h["epoch"] for h in other["fsdp_history"]]
    for ddp, fsdp in zip(main["history"], main["fsdp_history"], strict=True):
        assert fsdp["val_loss"] == pytest.approx(ddp["val_loss"], rel=1e-4)
        assert fsdp["grad_norm"] == pytest.approx(ddp["grad_norm"], rel=1e-4)
    assert main["fsdp_weights"] == pytest.approx(main["weights"], rel=1e-4, abs=1e-5)
    assert other["fsdp_weights"] == []  # full weights are gathered on rank 0 only


def test_a_sharded_fsdp_resume_ends_with_the_uninterrupted_weights(reports: dict) -> None:
    main = reports["ranks"][0]
    assert main["fsdp_resumed_from"] == 1
    assert main["fsdp_resumed_weights"] == pytest.approx(main["fsdp_uninterrupted_weights"], rel=1e-6, abs=1e-7)
    state = trainer.load_checkpoint(reports["checkpoints"].parent / "fsdp-checkpoints" / "epoch-0003.pt")
    assert set(state["model"]) == set(residual_mlp(8, 16, 3, dropout=0.3).state_dict())  # full, plain keys


def test_fsdp_shards_a_model_with_tied_weights(reports: dict) -> None:
    # Sharding each layer on its own raised "Parameter ... is shared with a parameter already managed
    # by another FSDP group" (a language model's tied embedding and head); shared ones go to the root.
    for rank in reports["ranks"]:
        assert math.isfinite(rank["tied_val_loss"]) and rank["tied_still_shared"]
