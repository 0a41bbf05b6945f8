"""Study names cannot escape the project: one rule for every name, every derived path checked, and
`search delete` removing only what the study's trials wrote."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from search.exceptions import SearchError
from search.settings import MAX_NAME_LENGTH, check_study_name, remove_study_dir, study_dir

VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HOSTILE = ["..", ".", "../../escape", "/tmp", "a/b", "a\\b", "a\x00b", "é", "名前", "x" * 300, "$(touch pwned)",
           "a;rm -rf ~", "-rf", "a b", "", " ", "~", "a\nb", ".hidden"]  # fmt: skip
"""What the issue tried and what a shell or a file system treats specially."""
PREFIXED = st.builds(lambda a, b: a + b, st.sampled_from(["..", "/", "./", "~/"]), st.text(max_size=10))
NAMES = st.one_of(st.text(min_size=0, max_size=80), st.sampled_from(HOSTILE), PREFIXED)


@given(NAMES)
@example("a" * MAX_NAME_LENGTH)
@example("a" * (MAX_NAME_LENGTH + 1))
def test_a_name_is_accepted_only_under_the_rule(name):
    ok = VALID.fullmatch(name) is not None and len(name) <= MAX_NAME_LENGTH
    if ok:
        assert check_study_name(name) == name
    else:
        with pytest.raises(SearchError) as info:
            check_study_name(name)
        assert "\n" not in str(info.value) and "is not a valid study name" in str(info.value)


@given(NAMES)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
def test_a_study_folder_is_always_one_level_inside_its_root(tmp_path, name):
    root = tmp_path / "checkpoints"
    try:
        folder = study_dir(root, name)
    except SearchError:
        return
    assert folder.parent == root.resolve() and folder.name == name


def test_a_study_folder_that_links_out_of_its_root_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "resmlp").symlink_to(outside)
    with pytest.raises(SearchError, match="is not inside"):
        study_dir(root, "resmlp")


def test_removing_a_study_folder_takes_only_its_trials_folders(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the study's")
    folder = tmp_path / "checkpoints" / "resmlp"
    for name in ("trial-0", "trial-3", "trial-99"):
        (folder / name).mkdir(parents=True)
        (folder / name / "ckpt.pt").write_text("x")
    (folder / "trial-1").symlink_to(outside)  # a link named like a trial's folder: unlinked, not followed
    (folder / "notes.txt").write_text("the user's")
    kept = remove_study_dir(tmp_path / "checkpoints", "resmlp", trials={0, 1, 3})
    assert sorted(p.name for p in kept) == ["notes.txt", "trial-99"]
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "trial-99"]
    assert (outside / "keep.txt").read_text() == "not the study's"
    (folder / "notes.txt").unlink()
    assert remove_study_dir(tmp_path / "checkpoints", "resmlp") == [] and not folder.exists()


ARGV_HOSTILE = st.one_of(
    st.sampled_from([n for n in HOSTILE if n and "\x00" not in n]),  # argv cannot carry a NUL
    st.text(min_size=1, max_size=40).filter(lambda n: not VALID.fullmatch(n) and "\x00" not in n),
)


@pytest.mark.parametrize("command", ["start", "delete", "export", "worker", "status"])
@given(name=ARGV_HOSTILE)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=15, deadline=None)
def test_hostile_names_are_refused_in_one_line_and_create_nothing(tmp_path, monkeypatch, search_main, command, name):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    extra = {"start": ["--study", "resmlp", "--trials", "2", "--workers", "0"], "delete": ["--yes"]}.get(command, [])
    code, out, err = search_main([command, "--name", name, *extra])
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --name ") and "is not a valid study name" in lines[0]
    assert list(work.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_a_hostile_study_file_name_is_refused_before_anything_is_created(tmp_path, search_main, monkeypatch):
    study = tmp_path / "dots.py"
    source = (Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py").read_text()
    assert '    name = "sleep"' in source
    study.write_text(source.replace('    name = "sleep"', '    name = ".."'))
    monkeypatch.chdir(tmp_path)
    code, _, err = search_main(["start", "--study", str(study), "--trials", "2", "--workers", "0"])
    assert code == 2 and "the name of study" in err and "is not a valid study name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dots.py"]


def test_delete_keeps_what_the_study_did_not_write(tmp_path, make_demo, search_main):
    import storage

    project = tmp_path / "project"
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False, tracking=True)
    folder = project / "checkpoints" / demo.name
    (folder / "trial-0").mkdir(parents=True)
    (folder / "trial-500").mkdir()
    (folder / "mine.txt").write_text("the user's")
    code, out, err = search_main(["delete", *demo.flags(), "--yes"])
    assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt", "trial-500"]
    assert "kept 2 entries not written by this study's trials" in out
    assert (project / "optuna.db").exists() and (project / "mlflow.db").exists()


def test_next_commands_are_safe_to_paste(tmp_path, monkeypatch):
    """Quoted for a shell, and no `***` where a password was (it would be sent as the password)."""
    from search.api._output import password_left_out, where_flags
    from search.settings import Locations

    for var in ("SEARCH_PROJECT_DIR", "SEARCH_STORAGE", "SEARCH_TRACKING_URI", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    project = tmp_path / "my project $(x)"
    url = "postgresql+psycopg2://alice:s3cr%40t@db.example:5432/hp?sslmode=require"
    loc = Locations(project_dir=project, storage_url=url, tracking_uri=url, artifact_location=None,
                    checkpoint_root=project / "checkpoints", embedded=False)  # fmt: skip
    flags = where_flags(loc)
    words = shlex.split(" ".join(flags))
    bare = "postgresql+psycopg2://alice@db.example:5432/hp?sslmode=require"
    assert words == ["--project-dir", str(project), "--storage", bare, "--tracking-uri", bare]
    assert "***" not in " ".join(flags) and "s3cr" not in " ".join(flags)
    assert password_left_out(loc)
    monkeypatch.setenv("SEARCH_STORAGE", url)
    monkeypatch.setenv("SEARCH_TRACKING_URI", url)
    assert not password_left_out(loc) and where_flags(loc) == ["--project-dir", shlex.quote(str(project))]
    assert os.sep in str(project)


def test_next_commands_name_a_sqlite_file_given_with_storage(tmp_path, monkeypatch):
    """Only the project's own embedded store goes without --storage: a SQLite file given with it
    is named again, or the next command would look in the project and find no study."""
    from search.api import resolve_locations
    from search.api._output import where_flags

    for var in ("SEARCH_PROJECT_DIR", "SEARCH_STORAGE", "SEARCH_TRACKING_URI", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    own = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=None)
    assert own.embedded and where_flags(own) == []
    url = f"sqlite:///{tmp_path}/elsewhere.db"
    given = resolve_locations(storage=url, tracking_uri=None, artifact_location=None, project_dir=None)
    assert not given.embedded and where_flags(given) == ["--storage", url]
