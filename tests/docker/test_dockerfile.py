"""docker/Dockerfile and its ignore file, checked statically (no Docker engine here).

A small parser turns the Dockerfile into instructions the way BuildKit reads it: backslash
continuations joined, comment lines inside them dropped, parser directives skipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / "docker" / "Dockerfile.dockerignore"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"

_HEREDOC = re.compile(r"<<-?\s*[\"']?[A-Za-z_]")
_ARG_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    """Upper-case instruction name: FROM, RUN, COPY, ..."""
    args: str
    """Everything after the keyword, continuation lines joined with a space."""
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array arguments of ENTRYPOINT/CMD/RUN, or None for the shell form."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None

    def words(self) -> list[str]:
        """Arguments without --flags (COPY --chown=..., FROM --platform=...)."""
        return [word for word in shlex.split(self.args) if not word.startswith("--")]


def parse_dockerfile(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # blank, comment or parser directive; inside a continuation BuildKit drops them too
        if not pending:
            start = number
        pending.append(line.removesuffix("\\").strip())
        if line.endswith("\\"):
            continue
        keyword, _, args = " ".join(pending).partition(" ")
        if _HEREDOC.search(args):
            raise NotImplementedError(f"line {start}: heredocs are not parsed here")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    if pending:
        raise ValueError(f"line {start}: a continuation runs past the end of the file")
    return instructions


def shell_commands(run: Instruction) -> list[list[str]]:
    """The simple commands of a shell-form RUN, split at &&, || and ;."""
    commands: list[list[str]] = [[]]
    lexer = shlex.shlex(run.args, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def pip_installs(instructions: list[Instruction]) -> list[list[str]]:
    return [
        command
        for run in instructions
        if run.keyword == "RUN"
        for command in shell_commands(run)
        if "pip" in command[:3] and "install" in command
    ]


def env_settings(instructions: list[Instruction]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for env in (i for i in instructions if i.keyword == "ENV"):
        words = shlex.split(env.args)
        if "=" not in words[0]:  # legacy `ENV KEY value`
            settings[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            settings[key] = value
    return settings


def resolve_from(instructions: list[Instruction]) -> list[str]:
    """Image references of every FROM, with the ARG defaults declared before the first FROM."""
    defaults: dict[str, str] = {}
    images: list[str] = []
    for instruction in instructions:
        if instruction.keyword == "ARG" and not images:
            name, _, default = instruction.args.partition("=")
            defaults[name.strip()] = default.strip().strip('"')
        elif instruction.keyword == "FROM":
            reference = instruction.words()[0]
            images.append(_ARG_REFERENCE.sub(lambda m: defaults.get(m[1], m[0]), reference))
    return images


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project_packages() -> list[str]:
    patterns = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*.") for pattern in patterns]


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def index_of(instructions: list[Instruction], keyword: str, predicate: Any) -> int:
    matches = [n for n, i in enumerate(instructions) if i.keyword == keyword and predicate(i)]
    assert matches, f"no {keyword} matches"
    return matches[0]


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


# --- the build context ----------------------------------------------------------------------------


def dockerignore_patterns() -> list[str]:
    lines = (line.strip() for line in DOCKERIGNORE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def is_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern_regex(pattern.removeprefix("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


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
