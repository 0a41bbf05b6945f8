"""Reading docker/compose.yaml as Compose reads it (no Docker engine here): YAML (with merge keys), then
``${VAR}`` interpolation from docker/.env.example, then the Compose Specification's JSON schema.
``tests/docker/conftest.py`` puts this folder on ``sys.path`` and holds the fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
ENV_EXAMPLE = DOCKER_DIR / ".env.example"
SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "compose-spec.json"
SCHEMA_SHA256 = "46b7d35f19dd93a05f8fea530291bf84d881c1791ec167ecf0e6fb94e639d496"

# Compose's interpolation syntax: $$ is a literal $, else $NAME or ${NAME[:-?+]...}.
VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)
_SECRET_NAME = re.compile(r"passw(or)?d|secret|token|api_?key|credential|(^|_)pass$", re.IGNORECASE)
# A value that hands the secret over from the environment, with no literal fallback.
_SECRET_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}")
_PASSWORD_IN_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@")


class UnsetVariableError(Exception):
    pass


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            values[key.strip()] = value.strip()
    return values


def interpolate(text: str, env: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg, value = match["op"] or "", match["arg"] or "", env.get(name)
        present = value is not None and (value != "" or not op.startswith(":"))
        if op.endswith("-"):
            return value if present else arg  # type: ignore[return-value]
        if op.endswith("?"):
            if not present:
                raise UnsetVariableError(f"{name}: {arg}")
            return value  # type: ignore[return-value]
        if op.endswith("+"):
            return arg if present else ""
        return value or ""

    return VARIABLE.sub(replace, text)


def walk_values(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from walk_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_values(item)
    elif isinstance(node, str):
        yield node


def interpolate_tree(node: Any, env: dict[str, str]) -> Any:
    """Compose interpolates values, never keys."""
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    return interpolate(node, env) if isinstance(node, str) else node


def referenced_variables(node: Any) -> dict[str, set[str]]:
    """Variable name -> the operators it is used with ('' for a plain ${NAME})."""
    used: dict[str, set[str]] = {}
    for text in walk_values(node):
        for match in VARIABLE.finditer(text):
            if not match["escaped"]:
                used.setdefault(match["braced"] or match["named"], set()).add(match["op"] or "")
    return used


def literal_secrets(node: Any, where: str = "") -> list[str]:
    """Secret-looking settings that hold a literal instead of a ``${VAR}`` from the environment."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{where}.{key}" if where else str(key)
            if _SECRET_NAME.search(str(key)) and not isinstance(value, dict | list):
                if not _SECRET_REFERENCE.fullmatch(str(value)):
                    found.append(path)
            else:
                found += literal_secrets(value, path)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            key, sep, value = item.partition("=") if isinstance(item, str) else ("", "", "")
            if sep and _SECRET_NAME.search(key) and not _SECRET_REFERENCE.fullmatch(value):
                found.append(f"{where}[{index}]")
            else:
                found += literal_secrets(item, f"{where}[{index}]")
    return found


def urls_with_passwords(node: Any) -> list[str]:
    """Run on the interpolated file: a password put in a URL even through ${VAR} shows up in ps and logs."""
    return [value for value in walk_values(node) if _PASSWORD_IN_URL.search(value)]


def schema_errors(schema: dict[str, Any], document: dict[str, Any]) -> list[str]:
    errors = Draft7Validator(schema).iter_errors(document)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        pairs = (item.partition("=") for item in environment)
        return {key: value for key, _, value in pairs}
    return {key: str(value) for key, value in environment.items()}


def waits_for(service: dict[str, Any], dependency: str, condition: str) -> bool:
    depends_on = service.get("depends_on") or {}
    return isinstance(depends_on, dict) and (depends_on.get(dependency) or {}).get("condition") == condition


def named_volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Volume name -> mount target, for named volumes only (not bind mounts)."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type", "volume") == "volume" and volume.get("source"):
                mounts[volume["source"]] = volume["target"]
        else:
            source, _, rest = volume.partition(":")
            if rest and not source.startswith((".", "/", "~", "$")):
                mounts[source] = rest.split(":")[0]
    return mounts


def option(command: list[str], flag: str) -> str:
    assert flag in command, f"{flag} missing from {command}"
    return command[command.index(flag) + 1]
