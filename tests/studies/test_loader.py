"""Loading a user's study file: every way it can be right, and every way it can be wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

import studies
from studies import StudyLoadError, load_study_file

STUDY_CLASS = """
from __future__ import annotations

from dataclasses import dataclass

from studies import Fidelity


@dataclass(frozen=True)
class Params:
    n: int


class Tiny:
    name = "tiny"
    metric = "val_loss"
    direction = "{direction}"
    search_fidelity = Fidelity(epochs=1)
    full_fidelity = Fidelity(epochs=2)

    def __init__(self, width: int = 1) -> None:
        self.width = width

    def suggest(self, trial):
        return Params(trial.suggest_int("n", 1, 2))

    def load_data(self):
        raise NotImplementedError

    def build_model(self, params, data):
        raise NotImplementedError

    def train_config(self, params, fidelity):
        raise NotImplementedError
"""


def write(tmp_path: Path, body: str, direction: str = "minimize", name: str = "user_study.py") -> Path:
    path = tmp_path / name
    path.write_text(STUDY_CLASS.format(direction=direction) + textwrap.dedent(body))
    return path


def test_module_level_study_variable(tmp_path: Path) -> None:
    study = load_study_file(write(tmp_path, "study = Tiny()\n"))
    assert study.name == "tiny"
    assert study.suggest(_Fixed(n=2)).n == 2  # a dataclass defined in the file works


def test_make_study_receives_options(tmp_path: Path) -> None:
    path = write(tmp_path, "def make_study(width: int = 1):\n    return Tiny(width)\n")
    study: Any = load_study_file(path, width=7)
    assert study.width == 7
    assert getattr(studies.get_study(str(path), width=3), "width", None) == 3


def test_sole_protocol_object_is_found(tmp_path: Path) -> None:
    assert load_study_file(write(tmp_path, "my_study = Tiny()\n")).name == "tiny"


def test_two_files_with_the_same_name_do_not_collide(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first: Any = load_study_file(write(tmp_path / "a", "study = Tiny(1)\n", name="study.py"))
    second: Any = load_study_file(write(tmp_path / "b", "study = Tiny(2)\n", name="study.py"))
    assert (first.width, second.width) == (1, 2)
    assert type(first).__module__ != type(second).__module__


@pytest.mark.parametrize(
    ("body", "direction", "phrase"),
    [
        ("x = 1\n", "minimize", "no study found in"),
        ("a = Tiny()\nb = Tiny()\n", "minimize", "several study objects (a, b)"),
        ("study = Tiny()\n", "upwards", "direction must be 'minimize' or 'maximize', got 'upwards'"),
        ("def oops(:\n    pass\n", "minimize", "syntax error in"),
        ("raise RuntimeError('no GPU here')\n", "minimize", "failed: RuntimeError: no GPU here"),
        ("def make_study():\n    raise ValueError('bad size')\n", "minimize", "bad size"),
    ],
    ids=["no-object", "ambiguous", "direction", "syntax", "import-error", "factory-error"],
)
def test_bad_files_fail_with_one_clear_line(tmp_path: Path, body: str, direction: str, phrase: str) -> None:
    with pytest.raises(StudyLoadError) as info:
        load_study_file(write(tmp_path, body, direction=direction))
    assert phrase in str(info.value)
    assert "\n" not in str(info.value)


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("x = 1\ndef oops(:\n")
    with pytest.raises(StudyLoadError, match=r"broken\.py, line 2"):
        load_study_file(path)


def test_missing_attributes_are_named(tmp_path: Path) -> None:
    path = tmp_path / "partial.py"
    path.write_text(
        "class Half:\n    name = 'half'\n    metric = 'val_loss'\n    direction = 'minimize'\n"
        "    def suggest(self, trial):\n        return None\n\nstudy = Half()\n"
    )
    with pytest.raises(StudyLoadError) as info:
        load_study_file(path)
    message = str(info.value)
    assert "missing search_fidelity, full_fidelity, load_data, build_model, train_config" in message
    assert "suggest" not in message.split("missing")[1]


def test_missing_file_and_wrong_suffix(tmp_path: Path) -> None:
    with pytest.raises(StudyLoadError, match="study file not found"):
        load_study_file(tmp_path / "nope.py")
    (tmp_path / "study.txt").write_text("study = 1\n")
    with pytest.raises(StudyLoadError, match="must be a .py file"):
        load_study_file(tmp_path / "study.txt")


def test_options_need_make_study(tmp_path: Path) -> None:
    with pytest.raises(StudyLoadError, match="takes no options"):
        load_study_file(write(tmp_path, "study = Tiny()\n"), width=2)
    path = write(tmp_path, "def make_study(width: int = 1):\n    return Tiny(width)\n")
    with pytest.raises(StudyLoadError, match=r"bad study options \(colour\); accepted: width"):
        load_study_file(path, colour="red")


def test_train_infra_is_optional_and_must_be_callable(tmp_path: Path) -> None:
    import trainer

    plain = load_study_file(write(tmp_path, "study = Tiny()\n"))
    assert studies.study_infra(plain, None, plain.search_fidelity) == trainer.Infra()
    body = "import trainer\n\nclass Own(Tiny):\n    def train_infra(self, params, fidelity):\n"
    body += "        return trainer.Infra(num_workers=fidelity.epochs)\n\nstudy = Own()\n"
    own = load_study_file(write(tmp_path, body, name="own.py"))
    assert studies.study_infra(own, None, own.full_fidelity) == trainer.Infra(num_workers=2)
    with pytest.raises(StudyLoadError, match="non-callable train_infra"):
        load_study_file(write(tmp_path, "class Odd(Tiny):\n    train_infra = 1\n\nstudy = Odd()\n", name="odd.py"))


class _Fixed:
    """Enough of optuna's FixedTrial for the tiny study, without importing optuna."""

    def __init__(self, **params: int) -> None:
        self.params = params

    def suggest_int(self, name: str, low: int, high: int) -> int:
        return self.params[name]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"rows": "abc"}, "option rows must be a whole number, got 'abc'"),
        ({"rows": 2.5}, "option rows must be a whole number, got 2.5"),
        ({"search_epochs": "many"}, "option search_epochs must be a whole number, got 'many'"),
        ({"data_fraction": "half"}, "option data_fraction must be a number, got 'half'"),
    ],
)
def test_a_number_option_that_is_not_one_is_named(options, said):
    """The factory's own int() would say only "invalid literal for int() with base 10"."""
    import studies

    with pytest.raises(studies.StudyError) as info:
        studies.get_study("resmlp", **options)
    assert said in str(info.value) and "\n" not in str(info.value)


def test_number_options_given_as_text_still_work():
    import studies

    study = studies.get_study("resmlp", rows="300", data_fraction="0.5", search_epochs=3.0)
    assert study.search_fidelity.epochs == 3 and study.search_fidelity.data_fraction == 0.5
