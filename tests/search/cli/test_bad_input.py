"""Bad input: one line on stderr, exit code 2, and nothing created."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SLEEP_STUDY = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py"


def _assert_one_line_error(proc, fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--trials", "0"], "--trials must be a positive number"),
        (["--trials", "-3"], "--trials must be a positive number"),
        (["--trials", "5", "--sampler", "hyperopt"], "unknown sampler 'hyperopt'; choose one of: auto, tpe"),
        (["--trials", "5", "--pruner", "threshold"], "unknown pruner 'threshold'"),
        (["--trials", "5", "--pruner", "wilcoxon"], "wilcoxon compares a trial's folds with the best trial's"),
        (["--trials", "5", "--pruner", "median:startup=x"], "bad value 'x' for pruner option median:startup"),
        (["--trials", "5", "--pruner", "hyperband:warmup=5"], "unknown option 'warmup' for pruner 'hyperband'"),
        (["--trials", "5", "--heartbeat-interval", "0"], "--heartbeat-interval must be a positive number of seconds"),
        (
            ["--trials", "5", "--heartbeat-interval", "10", "--grace-period", "10"],
            "--grace-period (10 s) must be longer than --heartbeat-interval (10 s)",
        ),
        (["--trials", "5", "--db-outage-limit", "-1"], "--db-outage-limit must be a positive number of seconds"),
        (["--trials", "5", "--stall-timeout", "0"], "--stall-timeout must be a positive whole number of seconds or"),
        (["--trials", "5", "--stall-timeout", "-60"], "--stall-timeout must be a positive whole number of seconds"),
        (["--trials", "5", "--stall-timeout", "soon"], "--stall-timeout must be a positive whole number of seconds"),
        (["--trials", "5", "--patience", "0"], "--patience must be a positive whole number of epochs, auto or off"),
        (["--trials", "5", "--patience", "soon"], "--patience must be a positive whole number of epochs, auto or off"),
        (
            ["--trials", "5", "--checkpoint-every", "-1"],
            "--checkpoint-every must be >= 0 seconds (0: every epoch), got -1",
        ),
        (["--trials", "5", "--latency-batch", "0"], "--latency-batch must be a positive number of rows, got 0"),
    ],
)
def test_bad_start_flags(cli, tmp_path, args, fragment):
    proc = cli("start", "--study", "resmlp", *args, cwd=tmp_path)
    _assert_one_line_error(proc, fragment)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("study", ["resmlp", "file"])
@pytest.mark.slow
def test_workers_started_early_leave_nothing_when_the_input_is_bad(cli, tmp_path, study):
    """`search start` starts its workers before it checks the input (they import torch meanwhile),
    for a built-in study and for a study file alike: on bad input they exit without a trace, no
    process left, no temporary log."""
    import psutil

    work, temp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    if study == "file":
        study = str(tmp_path / "sleep.py")
        shutil.copy(SLEEP_STUDY, study)
    before = {p.pid for p in psutil.process_iter()}
    proc = cli("start", "--study", study, "--trials", "5", "--workers", "2", "--study-option", "nope=1",
               cwd=work, env={"TMPDIR": str(temp)})  # a study option is checked once the workers run  # fmt: skip
    _assert_one_line_error(proc, "nope")
    assert list(work.iterdir()) == [] and list(temp.glob("hpsearch-*")) == []  # (torch keeps a cache dir there)
    assert [p for p in psutil.process_iter(["cwd"]) if p.pid not in before and p.info["cwd"] == str(work)] == []


@pytest.mark.slow
def test_a_bad_study_option_names_the_option_and_creates_nothing(cli, tmp_path):
    proc = cli("start", "--study", "resmlp", "--trials", "5", "--study-option", "rows=abc", cwd=tmp_path)
    _assert_one_line_error(proc, "study 'resmlp': option rows must be a whole number, got 'abc'")
    assert list(tmp_path.iterdir()) == []


def test_unknown_study_lists_the_choices(cli, tmp_path):
    proc = cli("start", "--study", "resnmlp", "--trials", "5", cwd=tmp_path)
    _assert_one_line_error(proc, "unknown study 'resnmlp'; choose from resmlp, resnet, tinylm")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_project_directory(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = cli("start", "--study", "resmlp", "--trials", "5", "--project-dir", str(blocker / "p"), cwd=tmp_path)
    _assert_one_line_error(proc, "is not writable")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_study_file_without_a_study_object(cli, tmp_path):
    (tmp_path / "mine.py").write_text("x = 1\n")
    proc = cli("start", "--study", "mine.py", "--trials", "5", cwd=tmp_path)
    _assert_one_line_error(proc, "mine.py")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py"]


def test_missing_required_flag_is_one_line(cli, tmp_path):
    proc = cli("start", "--study", "resmlp", cwd=tmp_path)
    _assert_one_line_error(proc, "--trials")


@pytest.mark.parametrize("value", ["0", "-5", "1.5"])
def test_bad_worker_stall_timeout(cli, tmp_path, value):
    proc = cli("worker", "--name", "nope", "--stall-timeout", value, cwd=tmp_path)
    _assert_one_line_error(proc, f"--stall-timeout must be a positive whole number of seconds or off, got '{value}'")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--nnodes", "0"], "--nnodes must be >= 1, got 0"),
        (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT, the same on every node"),
        (["--nnodes", "2", "--rdzv-endpoint", "node1:http"], "--rdzv-endpoint must be HOST:PORT, got 'node1:http'"),
        (["--nnodes", "2", "--rdzv-endpoint", ":29400"], "--rdzv-endpoint must be HOST:PORT, got ':29400'"),
        (["--rdzv-endpoint", "node1:29400"], "--rdzv-endpoint and --rdzv-id need --nnodes 2 or more"),
        (["--sharding", "fsdp"], "--sharding fsdp needs trials of several processes: --gpus-per-trial"),
        (["--sharding", "zero3"], "Invalid value for '--sharding'"),
    ],
)
def test_bad_multi_node_flags_are_one_line_before_anything_is_opened(cli, tmp_path, flags, fragment):
    proc = cli("worker", "--name", "nope", *flags, cwd=tmp_path)
    _assert_one_line_error(proc, fragment)
    assert list(tmp_path.iterdir()) == []


def test_worker_for_a_study_that_does_not_exist(cli, tmp_path):
    proc = cli("worker", "--name", "nope", cwd=tmp_path)
    _assert_one_line_error(proc, "no study 'nope' here")
    # A SQLite file given with --storage is named, not the project's embedded store; none is made.
    proc = cli("worker", "--name", "nope", "--storage", f"sqlite:///{tmp_path}/x.db", cwd=tmp_path)
    _assert_one_line_error(proc, f"no study 'nope': {tmp_path}/x.db does not exist (check --storage)")
    assert not (tmp_path / "x.db").exists()


def test_studies_lists_builtins(cli, tmp_path):
    proc = cli("studies", cwd=tmp_path)
    assert proc.returncode == 0
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["resmlp", "resnet", "tinylm"]


def test_help_lists_commands_without_importing_heavy_libraries(cli, tmp_path):
    import subprocess
    import sys

    proc = cli("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "start" in proc.stdout and "worker" in proc.stdout
    # --help answers at once because torch and mlflow (seconds to import) stay unimported.
    probe = (
        "import sys\nsys.argv = ['search', '--help']\nimport search.cli\n"
        "print('torch' in sys.modules, 'mlflow' in sys.modules, 'optuna' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    assert out == "False False False"


@pytest.mark.slow
def test_bad_data_file_fails_before_anything_is_created(cli, tmp_path):
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n3,4\n")
    proc = cli("start", "--study", "resmlp", "--trials", "5", "--study-option", "path=rows.csv",
               "--study-option", "target=label", cwd=tmp_path)  # fmt: skip
    _assert_one_line_error(proc, "label")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


@pytest.mark.slow
def test_start_stops_with_one_line_when_every_local_worker_fails(cli, tmp_path):
    from pathlib import Path

    study_file = Path(__file__).resolve().parents[1] / "data" / "vanishing_data_study.py"
    marker = tmp_path / "read-once"
    proc = cli("start", "--study", str(study_file), "--trials", "3", "--workers", "2", "--no-retrain", "--quiet",
               "--study-option", f"marker={marker}", cwd=tmp_path)  # fmt: skip
    _assert_one_line_error(proc, "all 2 local workers failed")
    assert "is gone" in proc.stderr  # the reason, from the worker's log


@pytest.mark.slow
def test_an_early_worker_that_fails_before_the_study_exists_leaves_why_in_its_log(cli, tmp_path):
    """A worker started early dies while it loads the study (here the study file exits in worker
    processes only): the command fails with one line naming the worker's log, and that log, in the
    project, holds what the worker wrote before it died."""
    study = tmp_path / "dies.py"
    study.write_text(
        SLEEP_STUDY.read_text()
        + '\nimport sys\nif "worker" in sys.argv:\n    print("dying while loading", flush=True)\n    sys.exit(3)\n'
    )
    work = tmp_path / "work"
    work.mkdir()
    proc = cli("start", "--study", str(study), "--trials", "2", "--workers", "1", "--no-retrain", cwd=work)
    _assert_one_line_error(proc, "all 1 local workers failed (exit codes [3])")
    log = work / ".search" / "logs" / "worker-0.log"
    assert str(log) in proc.stderr
    assert "dying while loading" in log.read_text()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


FP16 = ["--study-option", "precision=fp16"]


@pytest.mark.skipif(_cuda(), reason="checks a machine without a CUDA GPU")
def test_an_fp16_study_with_local_workers_and_no_gpu_is_refused_before_anything_is_created(cli, tmp_path):
    """Every trial would fail ("fp16 needs a CUDA GPU") in a second and spend the budget."""
    proc = cli("start", "--study", "resmlp", "--trials", "3", "--workers", "1", *FP16, cwd=tmp_path)
    _assert_one_line_error(proc, "study 'resmlp' trains in fp16, which needs a CUDA GPU, and this machine has none")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(_cuda(), reason="checks a machine without a CUDA GPU")
@pytest.mark.slow
def test_a_worker_without_a_gpu_claims_no_trial_of_an_fp16_study(cli, tmp_path, warm_cli):
    """`search start --workers 0` creates the study for GPU nodes (no check: nothing trains here);
    a worker started on a machine without CUDA leaves with one line and takes no trial."""
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}, "PYTHONUNBUFFERED": "1"}
    follower = subprocess.Popen([sys.executable, "-m", "search", "start", "--study", "resmlp", "--trials", "3",
                                 "--workers", "0", "--no-retrain", *FP16], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        worker = cli("worker", "--study", "resmlp", "--wait-for-db", "120", cwd=tmp_path, timeout=240)
        assert worker.returncode == 2, worker.stdout + worker.stderr
        last = [line for line in worker.stderr.splitlines() if line.strip()][-1]
        assert last.startswith("error: study 'resmlp' trains in fp16, which needs a CUDA GPU"), worker.stderr
        assert "Traceback" not in worker.stderr
        trials = warm_cli("trials", "--study", "resmlp", "--json", cwd=tmp_path, check=True)
        assert json.loads(trials.stdout) == []
        assert follower.poll() is None  # still following, for workers elsewhere
    finally:
        follower.send_signal(signal.SIGINT)
        out, _ = follower.communicate(timeout=60)
    assert "study 'resmlp' created; budget 3 trials" in out, out


def test_a_study_whose_load_data_raises_is_one_line_and_creates_nothing(cli, tmp_path):
    """Any exception of the study's own ``load_data`` (not only a DataError) is bad input: one line
    naming the study and the error, exit 2, no project created."""
    study = tmp_path / "broken.py"
    study.write_text(
        SLEEP_STUDY.read_text() + "\n\ndef _broken(self):\n    raise FileNotFoundError('no such file: rows.parquet')\n"
        "\n\nSleepStudy.load_data = _broken\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    proc = cli("start", "--study", str(study), "--trials", "2", "--workers", "1", "--no-retrain", cwd=work)
    _assert_one_line_error(proc, "study 'sleep': load_data failed: FileNotFoundError: no such file: rows.parquet")
    assert list(work.iterdir()) == []
