"""Workers as a cluster scheduler starts them: the GPUs they were given (CUDA_VISIBLE_DEVICES, --gpus),
and one single-threaded worker per usable core on CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
QUICK = ["--study-option", "epoch_seconds=0.3", "--study-option", "epochs=2", "--pruner", "none", "--no-retrain"]


@pytest.fixture
def four_gpus(tmp_path, monkeypatch) -> dict[str, str]:
    """A fake ``nvidia-smi`` on PATH that lists GPUs 0-3, as on a 4-GPU node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n3\\n'\n")
    fake.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return {"PATH": path}


def test_without_cuda_visible_devices_every_gpu_of_the_node_is_used(four_gpus):
    from search.execution import default_workers, parse_gpus, visible_gpus

    assert visible_gpus() == ["0", "1", "2", "3"]
    assert default_workers() == 4
    assert parse_gpus("2,0") == ["2", "0"]


@pytest.mark.parametrize(
    ("assigned", "visible"),
    [
        ("1,3", ["1", "3"]),
        ("GPU-aa11,GPU-bb22", ["GPU-aa11", "GPU-bb22"]),
        ("2,-1,3", ["2"]),  # CUDA stops at the first invalid entry
        ("", []),
        ("NoDevFiles", []),  # Slurm, for a job given no GPU
    ],
)
def test_cuda_visible_devices_is_the_whole_set(four_gpus, monkeypatch, assigned, visible):
    from search.execution import default_workers, visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", assigned)
    assert visible_gpus() == visible
    assert default_workers() == (len(visible) or min(len(os.sched_getaffinity(0)), 16))


def test_on_cpu_one_single_threaded_worker_per_usable_core_and_no_more_than_the_trials(monkeypatch):
    from search.execution import _machine

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(6)))  # a job bound to 6 of the node's cores
    assert _machine.default_workers() == 6 and _machine.default_workers(trials=4) == 4
    assert _machine.worker_threads(6, []) == "1" and _machine.worker_threads(4, []) == "1"
    assert _machine.worker_threads(2, []) == "3" and _machine.worker_threads(1, ["0"]) == "4"
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    assert _machine.default_workers() == _machine.MAX_DEFAULT_CPU_WORKERS
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's setting wins
    assert _machine.worker_threads(6, []) == "2"


def test_gpu_indices_count_the_assigned_gpus_and_never_reach_outside(four_gpus, monkeypatch):
    from search.exceptions import SearchError
    from search.execution import parse_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert parse_gpus("all") == ["1", "3"]
    assert parse_gpus("1") == ["3"]
    with pytest.raises(SearchError, match=r"no GPU 2 here \(GPUs here: 0, 1\) \(CUDA_VISIBLE_DEVICES=1,3\)"):
        parse_gpus("2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(SearchError, match="no NVIDIA GPU is visible to this process"):
        parse_gpus("all")


@pytest.mark.slow
def test_a_search_on_assigned_gpus_runs_one_worker_on_each_and_records_it(cli, tmp_path, four_gpus):
    import optuna

    env = {**four_gpus, "CUDA_VISIBLE_DEVICES": "1,3"}
    # The second worker starts once the first has claimed, and imports torch for seconds: trials long
    # enough (3 s each, 18 s for one worker) that it joins before the first has claimed them all.
    slow = ["--study-option", "epoch_seconds=1.5", *QUICK[2:]]
    cli("start", "--study", SLEEP_STUDY, "--trials", "6", "--gpus", "all", *slow, cwd=tmp_path, env=env, check=True)
    study = optuna.load_study(study_name="sleep", storage=f"sqlite:///{tmp_path / '.search' / 'optuna.db'}")
    used = {t.user_attrs.get("gpus") for t in study.trials}
    assert used == {"1", "3"}  # each worker on one GPU of the set, none outside it
    assert len({t.user_attrs["worker"] for t in study.trials}) == 2
