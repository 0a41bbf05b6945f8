"""Where settings come from and what happens to them: resume, search.toml, environment, global flags.

Every setting is either used or refused in one line, never silently dropped.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
QUICK = ["--study", SLEEP_STUDY, "--study-option", "epoch_seconds=0", "--study-option", "epochs=2", "--workers", "1",
         "--no-retrain", "--pruner", "none"]  # fmt: skip


def _record(cwd: Path, name: str = "sleep") -> dict:
    import optuna

    storage = f"sqlite:///{cwd / '.search' / 'optuna.db'}"
    study = optuna.load_study(study_name=name, storage=storage)
    return {"spec": json.loads(study.user_attrs["hpsearch.spec"]), "budget": study.user_attrs["hpsearch.budget"],
            "trials": len(study.trials), "states": {t.state.name for t in study.trials}}  # fmt: skip


def _one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _finished_study(cli, cwd: Path) -> Path:
    """A finished two-trial study with a random sampler, seed 4 and five retries, in ``cwd``."""
    cli("start", *QUICK, "--trials", "2", "--sampler", "random", "--seed", "4", "--max-retries", "5", cwd=cwd,
        check=True)  # fmt: skip
    return cwd


@pytest.fixture
def resumable(cli, tmp_path) -> Path:
    """The finished study, one for each test that resumes it (and so changes it)."""
    return _finished_study(cli, tmp_path)


@pytest.fixture(scope="module")
def refused_resume(cli, tmp_path_factory) -> Path:
    """The same finished study, made once for the resumes that are refused: each of them checks that
    it changed nothing, so they can share it."""
    return _finished_study(cli, tmp_path_factory.mktemp("refused-resume"))


@pytest.mark.slow
def test_resume_without_flags_keeps_every_stored_setting(cli, resumable):
    proc = cli("start", "--study", SLEEP_STUDY, "--trials", "3", "--workers", "1", "--no-retrain", cwd=resumable,
               check=True)  # fmt: skip
    record = _record(resumable)
    settings = record["spec"]["settings"]
    assert (settings["sampler"], settings["seed"], settings["max_retries"], settings["pruner"]) == \
        ("random", 4, 5, "none")  # fmt: skip
    assert record["spec"]["options"] == {"epoch_seconds": 0, "epochs": 2}  # stored options, not the defaults
    assert record["budget"] == 3 and record["trials"] == 3
    assert "changed --trials: budget 2 -> 3" in proc.stdout
    assert "--sampler" not in proc.stdout


@pytest.mark.slow
def test_resume_with_a_new_sampler_and_retries_applies_them_and_says_so(cli, resumable):
    proc = cli("start", *QUICK, "--trials", "2", "--sampler", "tpe", "--seed", "4", "--max-retries", "1",
               "--stall-timeout", "off", cwd=resumable, check=True)  # fmt: skip
    assert "changed --sampler: random -> tpe" in proc.stdout
    assert "changed --max-retries: 5 -> 1" in proc.stdout
    assert "changed --stall-timeout: 1800 -> off" in proc.stdout
    assert "--seed" not in proc.stdout  # the same value is no change
    settings = _record(resumable)["spec"]["settings"]
    assert (settings["sampler"], settings["max_retries"], settings["stall_timeout"]) == ("tpe", 1, 0)


@pytest.mark.slow
def test_the_default_sampler_is_chosen_by_workers_and_kept_on_resume(cli, tmp_path):
    proc = cli("start", *QUICK, "--trials", "2", cwd=tmp_path, check=True)
    assert "sampler: gp:until=100, chosen by --sampler auto for 1 worker" in proc.stdout
    assert "Gaussian process (10 random trials first, pruned trials read as the worst complete one; TPE from " \
           "trial 100 on)" in proc.stdout  # fmt: skip
    assert _record(tmp_path)["spec"]["settings"]["sampler"] == "gp:until=100"  # what workers build, resuming keeps
    proc = cli("start", *QUICK, "--trials", "3", "--sampler", "auto", cwd=tmp_path, check=True)
    assert "--sampler auto" not in proc.stdout and "changed --sampler" not in proc.stdout
    assert _record(tmp_path)["spec"]["settings"]["sampler"] == "gp:until=100" and _record(tmp_path)["trials"] == 3


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--seed", "5"], "--seed 5 differs from the study's stored --seed 4"),
        (["--latency-batch", "8"], "--latency-batch 8 differs from the study's stored --latency-batch 64"),
        (["--study-option", "epochs=3"], "differs from the study's stored options epoch_seconds=0,epochs=2"),
    ],
)
@pytest.mark.slow
def test_resume_that_would_change_the_data_is_refused_and_changes_nothing(cli, refused_resume, flags, fragment):
    before = _record(refused_resume)
    proc = cli("start", "--study", SLEEP_STUDY, "--trials", "4", "--workers", "1", *flags, cwd=refused_resume)
    assert fragment in _one_error_line(proc)
    assert _record(refused_resume) == before  # no budget change, no trial, no setting


@pytest.mark.slow
def test_search_toml_sets_any_flag_and_the_command_line_wins(cli, tmp_path, warm_cli):
    (tmp_path / "search.toml").write_text(
        f'[search]\nstudy = "{SLEEP_STUDY}"\ntrials = 2\nworkers = 1\nsampler = "random"\npruner = "none"\n'
        "no-retrain = true\n[search.study-option]\nepoch_seconds = 0\nepochs = 2\n"
        "[search.start]\nseed = 9\n[search.status]\njson = true\n"
    )
    cli("start", "--seed", "11", cwd=tmp_path, check=True)
    record = _record(tmp_path)
    assert record["budget"] == 2 and record["trials"] == 2
    settings = record["spec"]["settings"]
    assert (settings["sampler"], settings["pruner"], settings["seed"]) == ("random", "none", 11)
    assert record["spec"]["options"] == {"epoch_seconds": 0, "epochs": 2}
    status = warm_cli("status", cwd=tmp_path, check=True)  # --json and --study from the file
    assert json.loads(status.stdout)["finished"] == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("trails = 3\n", "'trails' is not a flag of any command (did you mean 'trials'?)"),
        ("[start]\njson = true\n", "'json' is not a flag of `search start`"),
        ("config = 'other.toml'\n", "'config' is not a flag"),
        ("trials = [\n", "cannot read config file"),
    ],
)
def test_a_bad_search_toml_is_refused_in_one_line(cli, tmp_path, text, fragment):
    (tmp_path / "search.toml").write_text(text)
    proc = cli("start", *QUICK, "--trials", "1", cwd=tmp_path)
    assert fragment in _one_error_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["search.toml"]


@pytest.mark.slow
def test_environment_beats_search_toml(cli, tmp_path):
    (tmp_path / "search.toml").write_text(f'project-dir = "{tmp_path / "from-file"}"\n')
    cli("start", *QUICK, "--trials", "1", cwd=tmp_path, env={"SEARCH_PROJECT_DIR": str(tmp_path / "from-env")},
        check=True)  # fmt: skip
    assert (tmp_path / "from-env" / "optuna.db").exists()
    assert not (tmp_path / "from-file").exists()


@pytest.mark.slow
def test_mlflow_tracking_uri_from_the_environment_receives_the_runs(cli, tmp_path):
    from mlflow import MlflowClient

    tracking = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    proc = cli("start", *QUICK, "--trials", "1", cwd=tmp_path, env={"MLFLOW_TRACKING_URI": tracking}, check=True)
    assert str(tmp_path / "elsewhere.db") in proc.stdout  # the start header names the store it uses
    assert not (tmp_path / ".search" / "mlflow.db").exists()
    client = MlflowClient(tracking, tracking)
    experiment = client.get_experiment_by_name("sleep")
    runs = client.search_runs([experiment.experiment_id])
    assert {r.data.tags.get("hpsearch.role") for r in runs} >= {"trial"}


@pytest.mark.slow
def test_a_search_with_retrain_prints_no_third_party_warnings(cli, tmp_path):
    options = [f"--study-option={o}" for o in ("data=synthetic", "search_epochs=1", "full_epochs=1")]
    proc = cli("start", "--study", "resmlp", "--trials", "1", "--workers", "1", *options, cwd=tmp_path, check=True)
    assert "is the new champion" in proc.stdout
    for noise in ("local version label", "Successfully registered", "Created version", "Warning", "WARNING"):
        assert noise not in proc.stdout + proc.stderr
    assert proc.stderr.strip() == ""  # nothing at all on stderr (ONNX export included)


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_works_before_or_after_the_subcommand(cli, tmp_path, where):
    args = ["status", "--name", "nope", "--project-dir", str(tmp_path / "p")]
    plain = cli(*args, cwd=tmp_path)
    assert "Traceback" not in plain.stderr and plain.returncode == 2
    debug = cli(*(["--debug", *args] if where == "before" else [*args, "--debug"]), cwd=tmp_path)
    assert "Traceback" in debug.stderr and debug.returncode != 0


@pytest.mark.slow
def test_quiet_after_the_subcommand_prints_only_the_summary(cli, tmp_path):
    proc = cli("start", *QUICK, "--trials", "1", "-q", cwd=tmp_path, check=True)
    assert "optuna storage:" not in proc.stdout  # the header is left out
    assert "1/1 trials finished" in proc.stdout


@pytest.mark.postgres
@pytest.mark.skipif(importlib.util.find_spec("psycopg") is None, reason="psycopg 3 is a test dependency")
@pytest.mark.slow
def test_psycopg3_urls_work_end_to_end(cli, tmp_path, pg_databases, warm_cli):
    storage_url, tracking_url = (u.replace("+psycopg2", "+psycopg") for u in (pg_databases(), pg_databases()))
    cli("start", *QUICK, "--trials", "2", "--storage", storage_url, "--tracking-uri", tracking_url, cwd=tmp_path,
        check=True)  # fmt: skip
    status = warm_cli("status", "--name", "sleep", "--json", "--storage", storage_url, cwd=tmp_path, check=True)
    assert json.loads(status.stdout)["complete"] == 2


def test_psycopg3_url_without_psycopg3_is_one_line(monkeypatch):
    import importlib.util as util

    import storage
    from storage import StorageError

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a))
    with pytest.raises(StorageError, match=r"needs psycopg 3 \(pip install 'psycopg\[binary\]'\)"):
        storage.normalize_db_url("postgresql+psycopg://u@h/db")


@pytest.mark.slow
def test_a_search_whose_every_trial_failed_exits_non_zero(cli, tmp_path):
    study = tmp_path / "broken.py"
    study.write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('sleep_study', {SLEEP_STUDY!r})\n"
        "sleep = sys.modules['sleep_study'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(sleep)\n\n"
        "class Broken(sleep.SleepStudy):\n"
        "    name = 'broken'\n\n"
        "    def build_model(self, params, data):\n"
        "        raise RuntimeError('no model today')\n\n"
        "study = Broken(epoch_seconds=0)\n"
    )
    proc = cli("start", "--study", str(study), "--trials", "2", "--workers", "1", "--no-retrain", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2/2 trials finished (0 complete, 0 pruned, 2 failed)" in proc.stdout
    assert "every trial failed: see `search trials --name broken --state fail`" in proc.stdout
