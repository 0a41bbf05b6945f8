"""Resolving settings: command line, then environment, then ``search.toml``, then defaults.

Click applies that order to every flag: the command line and a flag's environment variable come
first, and :func:`config_defaults` turns ``search.toml`` into the command's ``default_map``.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import click

from search.exceptions import SearchError
from search.settings import CONFIG_FILE, ENV_CONFIG

_NOT_FROM_FILE = {"config_file", "help", "version"}


def read_config_file(path: Path | None) -> tuple[dict[str, Any], Path] | None:
    """The ``[search]`` table (or the top level) of a TOML file and its path; None without a file.

    An explicit path (``--config`` or ``SEARCH_CONFIG``) that is missing is an error.
    """
    explicit = path is not None or ENV_CONFIG in os.environ
    candidate = path or Path(os.environ.get(ENV_CONFIG, CONFIG_FILE))
    if not candidate.exists():
        if explicit:
            raise SearchError(f"config file {candidate} does not exist")
        return None
    try:
        data = tomllib.loads(candidate.read_text())
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise SearchError(f"cannot read config file {candidate}: {exc}") from None
    section = data.get("search", data)
    if not isinstance(section, dict):
        raise SearchError(f"{candidate}: [search] must be a table of flags")
    return section, candidate


def config_defaults(ctx: click.Context, path: Path | None) -> dict[str, Any]:
    """``search.toml`` as this command's click ``default_map``; a key that is no flag is refused.

    Keys are flag names (``trials``, ``sampler``, ``study-option`` or ``study_option``). Top-level
    keys apply to every command that has the flag; a table named after a command (``[search.start]``)
    applies to that command only and wins over the top level.
    """
    read = read_config_file(path)
    if read is None:
        return {}
    section, where = read
    root = ctx.find_root().command
    commands = getattr(root, "commands", {})
    mine = _flags(ctx.command)
    known = {flag for cmd in commands.values() for flag in _flags(cmd)} | set(_flags(root))
    defaults: dict[str, Any] = {}
    scoped: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict) and key in commands:
            if key == ctx.info_name:
                scoped = value
            continue
        flag = _check_key(key, known, where)
        if flag in mine:
            defaults[mine[flag]] = _value(value)
    for key, value in scoped.items():
        flag = _check_key(key, set(mine), where, f"`search {ctx.info_name}`")
        defaults[mine[flag]] = _value(value)
    return defaults


def _flags(cmd: click.Command) -> dict[str, str]:
    """The flags a file may set for ``cmd``: normalised long name -> parameter name."""
    flags: dict[str, str] = {}
    for param in cmd.params:
        if not isinstance(param, click.Option) or param.hidden or param.name in _NOT_FROM_FILE or param.name is None:
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                flags[_normal(opt[2:])] = param.name
        flags[_normal(param.name)] = param.name
    return flags


def _normal(key: str) -> str:
    return key.replace("-", "_").lower()


def _check_key(key: str, known: set[str], where: Path, scope: str = "any command") -> str:
    flag = _normal(key)
    if flag in known:
        return flag
    close = difflib.get_close_matches(flag, sorted(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SearchError(f"{where}: {key!r} is not a flag of {scope}{hint}")


def _value(value: Any) -> Any:
    """TOML values as click expects them: a table of study options becomes KEY=VALUE strings."""
    if isinstance(value, dict):
        return [f"{k}={_scalar(v)}" for k, v in value.items()]
    return value


def _scalar(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def set_command_default(path: Path, command: str, key: str, value: list[str]) -> None:
    """Write ``key = value`` as a default of ``search <command>`` into the TOML file at ``path``
    (created if missing), keeping everything else in it; one line if the file cannot be updated."""
    text = path.read_text() if path.exists() else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SearchError(f"cannot read config file {path}: {exc}") from None
    header = f"[search.{command}]" if "search" in data or not data else f"[{command}]"
    line = f"{key} = [{', '.join(json.dumps(v) for v in value)}]"
    lines = text.splitlines()
    if header in (s.strip() for s in lines):
        start = next(i for i, s in enumerate(lines) if s.strip() == header) + 1
        end = next((i for i in range(start, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        old = [i for i in range(start, end) if lines[i].split("=")[0].strip() in (key, key.replace("_", "-"))]
        if old:
            lines[old[0]] = line
        else:
            lines.insert(start, line)
    else:
        lines += ["", header, line] if lines else [header, line]
    new_text = "\n".join(lines) + "\n"
    try:
        parsed = tomllib.loads(new_text)
        table = parsed.get("search", parsed)[command]
        written = table[key]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        written = None
    if written != value:
        raise SearchError(f"cannot update {path} safely; add `{line}` under {header} yourself")
    path.write_text(new_text)
