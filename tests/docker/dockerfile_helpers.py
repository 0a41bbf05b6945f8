"""Reading docker/Dockerfile and its ignore file the way BuildKit and Docker do (no Docker engine here).

A small parser turns the Dockerfile into instructions: backslash continuations joined, comment lines
inside them dropped, parser directives skipped. ``is_ignored`` applies the ignore file's rules.
``tests/docker/conftest.py`` puts this folder on ``sys.path``.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / "docker" / "Dockerfile.dockerignore"

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


def index_of(instructions: list[Instruction], keyword: str, predicate: Any) -> int:
    matches = [n for n, i in enumerate(instructions) if i.keyword == keyword and predicate(i)]
    assert matches, f"no {keyword} matches"
    return matches[0]


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
