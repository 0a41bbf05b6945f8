"""docker/compose.yaml: valid Compose (the Compose Specification), every variable documented in
docker/.env.example, and free of secrets. How it is wired: ``test_compose_wiring.py``."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from compose_helpers import (
    DOCKER_DIR,
    ENV_EXAMPLE,
    SCHEMA_FILE,
    SCHEMA_SHA256,
    VARIABLE,
    UnsetVariableError,
    interpolate,
    literal_secrets,
    referenced_variables,
    schema_errors,
    urls_with_passwords,
    walk_values,
)

# --- the Compose Specification ------------------------------------------------------------------


def test_vendored_schema_is_the_recorded_upstream_file() -> None:
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == SCHEMA_SHA256, (
        "tests/docker/data/compose-spec.json changed; it must stay the upstream file (see data/README.md)"
    )


def test_compose_file_satisfies_the_compose_specification(compose: dict[str, Any], schema: dict[str, Any]) -> None:
    assert schema_errors(schema, compose) == []


def test_schema_check_rejects_what_compose_rejects(compose: dict[str, Any], schema: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["worker"]["depends_on"]["pgbouncer"]["condition"] = "healthy"
    broken["services"]["worker"]["container-name"] = "worker"
    broken["volumes"]["pgdata"] = {"driver_opts": "not a mapping"}
    errors = "\n".join(schema_errors(schema, broken))
    assert "services/worker/depends_on" in errors
    assert "container-name" in errors
    assert "volumes/pgdata/driver_opts" in errors


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"preflight", "postgres", "pgbouncer", "mlflow", "dashboard", "start", "worker"}
    assert compose["name"] == "hpsearch", "volumes would be named after the docker/ directory"


# --- .env.example ---------------------------------------------------------------------------------


def test_every_variable_is_documented_in_env_example(raw_compose: dict[str, Any], env: dict[str, str]) -> None:
    used = referenced_variables(raw_compose)
    assert sorted(set(used) - set(env)) == [], "used by compose.yaml but missing from .env.example"
    assert sorted(set(env) - set(used)) == [], "in .env.example but used nowhere in compose.yaml"
    lines = ENV_EXAMPLE.read_text().splitlines()
    undocumented = [
        line.partition("=")[0]
        for previous, line in zip(lines, lines[1:], strict=False)
        if "=" in line and not line.startswith("#") and not previous.startswith("#")
    ]
    assert undocumented == [], "each setting needs a comment line right above it"


def test_required_variables_have_values_and_defaults_match_env_example(
    raw_compose: dict[str, Any], env: dict[str, str]
) -> None:
    for text in walk_values(raw_compose):
        for match in VARIABLE.finditer(text):
            name, op = match["braced"], match["op"] or ""
            if name and op.endswith("?"):
                assert env[name], f"{name} is required by compose.yaml but empty in .env.example"
            if name and op.endswith("-"):
                assert match["arg"] == env[name], f"default of {name} in compose.yaml differs from .env.example"


def test_real_env_file_is_git_ignored() -> None:
    ignored = (DOCKER_DIR / ".gitignore").read_text().splitlines()
    assert ".env" in ignored


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("$$HOME ${SET} $SET ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${SET:+y}", env) == "$HOME x x d d  y"
    with pytest.raises(UnsetVariableError):
        interpolate("${EMPTY:?needed}", env)


# --- secrets --------------------------------------------------------------------------------------


def test_no_literal_secrets_in_compose_file(
    raw_compose: dict[str, Any], compose: dict[str, Any], env: dict[str, str]
) -> None:
    assert literal_secrets(raw_compose) == []
    assert urls_with_passwords(compose) == []
    assert not any(env["POSTGRES_PASSWORD"] in value for value in walk_values(raw_compose))


@pytest.mark.parametrize(
    "document",
    [
        {"services": {"db": {"environment": {"POSTGRES_PASSWORD": "hunter2"}}}},
        {"services": {"db": {"environment": ["PGPASSWORD=hunter2"]}}},
        {"services": {"db": {"environment": {"PGPASSWORD": "${PGPASSWORD:-hunter2}"}}}},
        {"x-env": {"API_TOKEN": "abc123", "DB_PASS": "abc123"}},
    ],
)
def test_secret_check_flags_literals(document: dict[str, Any]) -> None:
    assert literal_secrets(document) != []


def test_secret_check_flags_passwords_in_urls() -> None:
    document = {"services": {"app": {"command": ["serve", "--db", "postgresql://user:hunter2@db/app"]}}}
    assert urls_with_passwords(document) == ["postgresql://user:hunter2@db/app"]
    assert urls_with_passwords({"url": "postgresql+psycopg2://user@db:5432/app"}) == []


def test_secret_check_accepts_references() -> None:
    document = {"environment": {"PGPASSWORD": "${POSTGRES_PASSWORD:?set it}", "DB_PASS": "${DB_PASS}"}}
    assert literal_secrets(document) == []
