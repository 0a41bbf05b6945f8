"""docker/Dockerfile.dockerignore: the build context holds what the image copies, and leaves out
secrets and local state."""

from __future__ import annotations

import pytest
from dockerfile_helpers import (
    DOCKERFILE,
    Instruction,
    dockerignore_patterns,
    is_ignored,
    parse_dockerfile,
    project_packages,
)


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_ignore_matcher_follows_docker_rules() -> None:
    patterns = ["*", "!src/", "**/__pycache__", "!src/keep.py[c]"]
    assert is_ignored("notes.txt", patterns) and is_ignored(".git/HEAD", patterns)
    assert not is_ignored("src/a/b.py", patterns)
    assert is_ignored("src/__pycache__/b.pyc", patterns) and is_ignored("__pycache__/x", patterns)
    assert not is_ignored("src/keep.pyc", patterns)


def test_build_context_holds_what_the_image_copies(instructions: list[Instruction]) -> None:
    patterns = dockerignore_patterns()
    for copy in (i for i in instructions if i.keyword == "COPY"):
        for source in copy.words()[:-1]:
            assert not is_ignored(source.rstrip("/"), patterns), f"COPY {source}: excluded from the context"
    for package in project_packages():
        assert not is_ignored(f"{package}/__init__.py", patterns)


@pytest.mark.parametrize(
    "path",
    [".env", "docker/.env", ".git/HEAD", ".venv/bin/python", "tests/docker/test_dockerfile.py",
     "search/__pycache__/cli.cpython-311.pyc", ".search/optuna.db", "mlruns/0/meta.yaml"],
)  # fmt: skip
def test_build_context_leaves_out_secrets_and_local_state(path: str) -> None:
    assert is_ignored(path, dockerignore_patterns())
