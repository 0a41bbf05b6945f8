"""An Optuna that ``storage._optuna_internals`` was not written for stops hpsearch with one line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import optuna
import pytest

from storage import StorageError
from storage._optuna_internals import check_optuna_version

SUPPORTED = "hpsearch supports Optuna >=5.0,<6.0"


def test_the_installed_optuna_is_supported() -> None:
    check_optuna_version(optuna.__version__)


@pytest.mark.parametrize("version", ["5.0.0", "5.0.1", "5.7.0rc1"])
def test_optuna_5_is_accepted(version: str) -> None:
    check_optuna_version(version)


@pytest.mark.parametrize("version", ["4.5.0", "6.0.0", "10.1", "(none)"])
def test_another_optuna_is_refused_naming_both_versions(version: str) -> None:
    with pytest.raises(StorageError) as raised:
        check_optuna_version(version)
    message = str(raised.value)
    assert message.startswith(f"Optuna {version} is installed; {SUPPORTED}")
    assert "\n" not in message


def test_a_command_under_an_unsupported_optuna_says_so_in_one_line(tmp_path: Path, cli: Any) -> None:
    """The check reads the installed distribution's version: a fake ``optuna-4.2.0`` found first on
    the path stands for an old Optuna installed (Optuna itself is not imported before the check)."""
    fake = tmp_path / "site"
    (fake / "optuna-4.2.0.dist-info").mkdir(parents=True)
    (fake / "optuna-4.2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: optuna\nVersion: 4.2.0\n")
    work = tmp_path / "work"
    work.mkdir()
    path = os.pathsep.join([str(fake), str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])
    proc = cli("status", "--study", "resmlp", cwd=work, env={"PYTHONPATH": path}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: Optuna 4.2.0 is installed; {SUPPORTED} (pip install -c constraints.txt optuna)"
    ]
    assert list(work.iterdir()) == []  # nothing made before the refusal
