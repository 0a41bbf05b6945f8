"""docker/Dockerfile, checked statically (no Docker engine here), through the parser in
``dockerfile_helpers.py``; its ignore file is checked in ``test_dockerignore.py``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_helpers import (
    DOCKERFILE,
    ROOT,
    Instruction,
    env_settings,
    index_of,
    parse_dockerfile,
    pip_installs,
    project_packages,
    pyproject,
    resolve_from,
    shell_commands,
)

COMPOSE_FILE = ROOT / "docker" / "compose.yaml"


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


# --- the parser itself ----------------------------------------------------------------------------


def test_parser_joins_continuations_and_skips_comments() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.11-slim AS base\n"
        "\n"
        "RUN pip install a \\\n"
        "    # a comment inside the continuation\n"
        " && echo done\n"
        'ENTRYPOINT ["search"]\n'
        "cmd --help\n"
    )
    parsed = parse_dockerfile(text)
    assert [(i.keyword, i.line) for i in parsed] == [("FROM", 2), ("RUN", 4), ("ENTRYPOINT", 7), ("CMD", 8)]
    assert parsed[1].args == "pip install a && echo done"
    assert shell_commands(parsed[1]) == [["pip", "install", "a"], ["echo", "done"]]
    assert parsed[2].exec_form() == ["search"] and parsed[3].exec_form() is None
    with pytest.raises(ValueError):
        parse_dockerfile("RUN echo \\\n")


# --- the Dockerfile -------------------------------------------------------------------------------


def test_base_images_are_pinned(instructions: list[Instruction]) -> None:
    images = resolve_from(instructions)
    assert images
    for image in images:
        tag = image.partition("@")[0].rpartition("/")[-1].partition(":")[2]
        assert "$" not in image, f"unresolved build argument in FROM {image}"
        assert "@sha256:" in image or (tag and tag != "latest" and re.search(r"\d", tag)), (
            f"FROM {image}: pin a versioned tag or a digest"
        )


def test_runs_as_a_non_root_user_it_creates(instructions: list[Instruction]) -> None:
    entrypoint = index_of(instructions, "ENTRYPOINT", lambda i: True)
    users = [i.args.split(":")[0] for i in instructions[:entrypoint] if i.keyword == "USER"]
    assert users and users[-1] not in ("root", "0"), "the last USER before ENTRYPOINT must not be root"
    created = [i for i in instructions if i.keyword == "RUN" and re.search(rf"useradd\b.*\b{users[-1]}\b", i.args)]
    assert created, f"USER {users[-1]} is never created"


def test_entrypoint_is_the_search_cli(instructions: list[Instruction]) -> None:
    entrypoints = [i for i in instructions if i.keyword == "ENTRYPOINT"]
    commands = [i for i in instructions if i.keyword == "CMD"]
    assert entrypoints[-1].exec_form() == ["search"]
    assert commands[-1].exec_form() == ["--help"]
    assert "search" in pyproject()["project"]["scripts"], "pip install . would not create the entrypoint"


def test_dependencies_are_installed_before_the_source_is_copied(instructions: list[Instruction]) -> None:
    packages = project_packages()
    copies = [i for i in instructions if i.keyword == "COPY"]
    sources = {source.rstrip("/") for copy in copies for source in copy.words()[:-1]}
    assert set(packages) <= sources, "a package from pyproject.toml is not copied into the image"
    first_source = index_of(instructions, "COPY", lambda i: any(w.rstrip("/") in packages for w in i.words()[:-1]))
    for manifest in ("constraints.txt", "pyproject.toml"):
        copied = index_of(instructions, "COPY", lambda i, m=manifest: m in i.words()[:-1])
        installed = index_of(instructions, "RUN", lambda i: "pip install" in i.args and "-r " in i.args)
        assert copied < installed < first_source, f"{manifest}: the dependency layer must precede the source"


def test_every_pip_install_skips_the_cache_and_uses_the_constraints(instructions: list[Instruction]) -> None:
    installs = pip_installs(instructions)
    assert len(installs) >= 2
    for command in installs:
        assert "--no-cache-dir" in command, command
        assert any(
            flag in ("-c", "--constraint") and value == "constraints.txt"
            for flag, value in zip(command, command[1:], strict=False)
        ), command


def python_snippets(run: Instruction) -> list[str]:
    return [command[2] for command in shell_commands(run) if command[:2] == ["python", "-c"]]


def run_snippet(code: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else None
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(("cuda", "passes"), [("13.0", True), (None, False)])
def test_build_fails_on_a_cpu_only_torch(
    instructions: list[Instruction], tmp_path: Path, cuda: str | None, passes: bool
) -> None:
    """constraints.txt pins torch's version only, which its CPU build satisfies too."""
    torch_layer = [i for i in instructions if any("torch" in c for c in pip_installs([i]))]
    assert len(torch_layer) == 1
    checks = python_snippets(torch_layer[0])
    assert checks, "the torch layer must check which build it installed"
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"__version__ = '2.13.0'\nclass version:\n    cuda = {cuda!r}\n")
    results = [run_snippet(code, tmp_path, pythonpath=tmp_path) for code in checks]
    assert all(r.returncode == 0 for r in results) is passes, [r.stderr for r in results]


def test_dependency_layer_installs_what_pyproject_declares(instructions: list[Instruction], tmp_path: Path) -> None:
    deps_layer = index_of(instructions, "RUN", lambda i: "-r " in i.args and "pip install" in i.args)
    (code,) = python_snippets(instructions[deps_layer])
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    result = run_snippet(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == pyproject()["project"]["dependencies"]


def test_python_output_is_unbuffered(instructions: list[Instruction]) -> None:
    assert env_settings(instructions).get("PYTHONUNBUFFERED") == "1", "logs would arrive late in docker logs"


def test_volume_mount_points_belong_to_the_image_user(instructions: list[Instruction]) -> None:
    """A new named volume takes the owner of its mount point in the image; root's would be read-only."""
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    user = [i.args for i in instructions if i.keyword == "USER"][-1].split(":")[0]
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    chowned = re.findall(rf"chown\s+(-R\s+)?{user}(?::\S+)?\s+(\S+)", runs)
    for name, service in compose["services"].items():
        if "build" not in service:
            continue
        for volume in service.get("volumes", []):
            source, _, target = volume.partition(":")
            if source.startswith((".", "/")):
                continue
            target = target.split(":")[0]
            assert re.search(rf"mkdir\b[^&;]*\s{re.escape(target)}\b", runs), f"{name}: {target} not created"
            assert any(
                target == path or (recursive and target.startswith(path.rstrip("/") + "/"))
                for recursive, path in chowned
            ), f"{name}: {target} is not owned by user {user}"
