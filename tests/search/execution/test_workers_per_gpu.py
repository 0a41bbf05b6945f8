"""Several workers per GPU (``--workers-per-gpu``): which GPU each gets, its threads and its cap on the
GPU's memory, as the processes are started; checked on CPU with fake device lists."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from search.exceptions import SearchError
from search.execution import _early, _machine

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
CAP = _machine.ENV_GPU_MEMORY_FRACTION


@pytest.fixture
def node(monkeypatch) -> None:
    """A job bound to 16 cores, no OMP_NUM_THREADS of the user's, no nvidia-smi (CUDA_VISIBLE_DEVICES is the set)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(CAP, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")


@pytest.fixture
def started(monkeypatch) -> Iterator[list[dict[str, str]]]:
    """The environments of the worker processes ``search start`` starts (none is really started)."""
    envs: list[dict[str, str]] = []

    class Started:
        def __init__(self, cmd: list[str], env: dict[str, str], **_: Any) -> None:
            envs.append(env)
            self.pid, self.stdin = -len(envs), None
            Path(env[_early.ENV_EARLY]).unlink()  # its temporary log

    monkeypatch.setattr(subprocess, "Popen", Started)
    monkeypatch.setattr(_early, "usable_cores", lambda: 64)  # all of them at once: none left for later
    yield envs
    for pid in range(-len(envs), 0):
        _early._UNRELEASED.pop(pid, None)
        _early._TEMP_LOGS.pop(pid, None)


def _start(**flags: Any) -> str:
    from search.api._options import StartOptions, check_flags, start_workers

    opts = StartOptions(study=SLEEP_STUDY, trials=10, **flags)
    check_flags(opts)
    return str(start_workers(opts, debug=False).count)


def _gpus_caps_threads(envs: list[dict[str, str]]) -> list[tuple[str, str | None, str]]:
    return [(env["CUDA_VISIBLE_DEVICES"], env.get(CAP), env["OMP_NUM_THREADS"]) for env in envs]


def test_two_gpus_three_workers_each_take_turns_and_share_memory_and_cores(node, started, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert _machine.default_workers(per_gpu=3) == 6
    assert _start(workers_per_gpu=3) == "6"
    # Round-robin: the first workers started (one per core, the rest later) are on different GPUs.
    assert _gpus_caps_threads(started) == [("0", "0.3", "2"), ("1", "0.3", "2")] * 3  # 0.9/3; 16 cores / 6
    assert "starting 6 local workers on GPUs 0,1 (3 per GPU, each allowed 30% of its memory)" in capsys.readouterr().out


def test_gpus_flag_picks_the_gpus_that_the_workers_share(node, started, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # --gpus counts the GPUs this process was given
    assert _start(gpus="1,3", workers_per_gpu=2) == "4"
    assert [env["CUDA_VISIBLE_DEVICES"] for env in started] == ["5", "7", "5", "7"]
    assert {env[CAP] for env in started} == {"0.45"}


def test_an_explicit_worker_count_is_dealt_to_the_gpus_in_turn(node, started, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert _start(workers=3, workers_per_gpu=4) == "3"  # --workers wins over GPUs x K
    # GPU 0 has two workers, capped; GPU 1's worker is alone on it: no cap.
    assert _gpus_caps_threads(started) == [("0", "0.45", "4"), ("1", None, "4"), ("0", "0.45", "4")]
    assert "(1-2 per GPU, each allowed 45% or all of its memory)" in capsys.readouterr().out


def test_one_worker_per_gpu_is_not_capped_and_the_fraction_flag_overrides(node, started, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert _start() == "2"
    assert _gpus_caps_threads(started) == [("0", None, "4"), ("1", None, "4")]
    assert "starting 2 local workers on GPUs 0,1; checking" in capsys.readouterr().out
    started.clear()
    _start(gpu_memory_fraction=0.5)  # alone on its GPU, capped when told
    assert [env[CAP] for env in started] == ["0.5", "0.5"]
    assert "on GPUs 0,1 (1 per GPU, each allowed 50% of its memory)" in capsys.readouterr().out
    started.clear()
    _start(workers_per_gpu=2, gpu_memory_fraction=0.2)
    assert [env[CAP] for env in started] == ["0.2"] * 4
    started.clear()
    _start(workers_per_gpu=2, gpu_memory_fraction=1.0)  # 1: no cap
    assert [env.get(CAP) for env in started] == [None] * 4


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"workers_per_gpu": 0}, r"^--workers-per-gpu must be >= 1, got 0$"),
        ({"gpu_memory_fraction": 0.0}, r"^--gpu-memory-fraction must be > 0 and <= 1 \(1: no cap\), got 0$"),
        ({"gpu_memory_fraction": 1.5}, r"^--gpu-memory-fraction must be > 0 and <= 1 \(1: no cap\), got 1.5$"),
    ],
)
def test_bad_sharing_flags_are_refused_before_anything_starts(node, started, monkeypatch, flags, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(SearchError, match=message):
        _start(**flags)
    assert started == []


def test_workers_per_gpu_without_a_gpu_is_refused(node, started, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(
        SearchError,
        match=r"^--workers-per-gpu 2 needs a GPU, and none is visible to this process "
        r"\(CUDA_VISIBLE_DEVICES=\); on CPU, --workers sets how many workers run$",
    ):
        _start(workers_per_gpu=2)
    with pytest.raises(SearchError, match=r"^--gpu-memory-fraction needs a GPU"):
        _start(gpu_memory_fraction=0.5)
    assert started == []


def test_the_worker_applies_its_cap_to_its_gpu(monkeypatch):
    import torch

    from search.execution._worker import cap_gpu_memory

    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    monkeypatch.delenv(CAP, raising=False)
    assert cap_gpu_memory() is None and calls == []  # alone on its GPU
    monkeypatch.setenv(CAP, "0.225")
    assert cap_gpu_memory() == 0.225 and calls == [(0.225, 0)]


def test_a_trial_over_its_cap_fails_with_one_line_that_says_so(monkeypatch):
    import torch

    from search.execution import fail_reason

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "79.10 GiB of which 60.00 GiB is free.\nsee PYTORCH_CUDA_ALLOC_CONF")  # fmt: skip
    monkeypatch.delenv(CAP, raising=False)
    assert fail_reason(oom).endswith("60.00 GiB is free.")
    monkeypatch.setenv(CAP, "0.225")
    reason = fail_reason(oom)
    assert "\n" not in reason and reason.startswith("CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert reason.endswith("[this worker's cap: 22% of the GPU's memory; fewer --workers-per-gpu or a larger "
                           "--gpu-memory-fraction give it more]")  # fmt: skip


def test_slurm_tasks_run_k_workers_per_gpu():
    from search.execution import SlurmArray

    script = SlurmArray("s", workers=2, gpus_per_worker=1, workers_per_gpu=4).script(Path("/logs"))
    assert "--gpus all --workers-per-gpu 4 --worker-index" in script
    assert "--workers-per-gpu" not in SlurmArray("s", workers=2).script(Path("/logs"))
    with pytest.raises(SearchError, match=r"^--workers-per-gpu 4 needs --gpus-per-worker 1 or more$"):
        SlurmArray("s", workers=2, gpus_per_worker=0, workers_per_gpu=4).script(Path("/logs"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers-per-gpu", "2"], "error: --workers-per-gpu 2 needs a GPU, and none is visible"),
        (["--workers-per-gpu", "0"], "error: --workers-per-gpu must be >= 1, got 0"),
        (["--workers-per-gpu", "1.5"], "'1.5' is not a valid integer"),
    ],
)
def test_bad_input_on_the_command_line_is_one_line_and_creates_nothing(cli, tmp_path, args, message):
    proc = cli("start", "--study", SLEEP_STUDY, "--trials", "3", *args, cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_search_worker_refuses_sharing_without_a_gpu_or_with_multi_gpu_trials(cli, tmp_path):
    no_gpu = cli("worker", "--name", "x", "--workers-per-gpu", "3", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert no_gpu.returncode == 2 and no_gpu.stderr.count("\n") == 1
    assert "--workers-per-gpu 3 needs a GPU" in no_gpu.stderr
    gang = cli("worker", "--name", "x", "--workers-per-gpu", "2", "--procs-per-trial", "2", cwd=tmp_path)
    assert gang.returncode == 2 and gang.stderr.count("\n") == 1 and "not with --gpus-per-trial" in gang.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_search_with_two_workers_per_gpu_runs_on_the_assigned_gpus(cli, tmp_path):
    import optuna

    # Fake GPUs (no nvidia-smi is asked: CUDA_VISIBLE_DEVICES is the set); the sleep study trains
    # nothing, so the workers' cap is passed to them and left unused (no CUDA here).
    env = {"CUDA_VISIBLE_DEVICES": "1,3"}
    quick = ["--study-option", "epoch_seconds=1.5", "--study-option", "epochs=2", "--pruner", "none", "--no-retrain"]
    proc = cli("start", "--study", SLEEP_STUDY, "--trials", "8", "--workers-per-gpu", "2", *quick, cwd=tmp_path,
               env=env, check=True)  # fmt: skip
    assert "starting 4 local workers on GPUs 1,3 (2 per GPU, each allowed 45% of its memory)" in proc.stdout
    study = optuna.load_study(study_name="sleep", storage=f"sqlite:///{tmp_path / '.search' / 'optuna.db'}")
    assert len(study.trials) == 8 and all(t.state.name == "COMPLETE" for t in study.trials)
    assert {t.user_attrs.get("gpus") for t in study.trials} == {"1", "3"}
