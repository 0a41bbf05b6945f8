"""docker/compose.yaml: valid Compose, wired the way a deployment needs, and free of secrets.

No Docker engine here, so the file is read as Compose reads it: YAML (with merge keys), then
``${VAR}`` interpolation from docker/.env.example, then the Compose Specification's JSON schema.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator
from sqlalchemy.engine import make_url

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
ENV_EXAMPLE = DOCKER_DIR / ".env.example"
SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "compose-spec.json"
SCHEMA_SHA256 = "46b7d35f19dd93a05f8fea530291bf84d881c1791ec167ecf0e6fb94e639d496"

# Compose's interpolation syntax: $$ is a literal $, else $NAME or ${NAME[:-?+]...}.
_VARIABLE = re.compile(
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

    return _VARIABLE.sub(replace, text)


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
        for match in _VARIABLE.finditer(text):
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


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE)


@pytest.fixture(scope="module")
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose(raw_compose: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    return interpolate_tree(raw_compose, env)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


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


# --- the Compose Specification ------------------------------------------------------------------


def test_vendored_schema_is_the_recorded_upstream_file() -> None:
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == SCHEMA_SHA256, (
        "tests/docker/data/compose-spec.json changed; it must stay the upstream file (see data/README.md)"
    )


def test_compose_file_satisfies_the_compose_specification(compose: dict[str, Any], schema: dict[str, Any]) -> None:
    assert schema_errors(schema, compose) == []


def test_schema_check_rejects_what_compose_rejects(compose: dict[str, Any], schema: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["worker"]["depends_on"]["postgres"]["condition"] = "healthy"
    broken["services"]["worker"]["container-name"] = "worker"
    broken["volumes"]["pgdata"] = {"driver_opts": "not a mapping"}
    errors = "\n".join(schema_errors(schema, broken))
    assert "services/worker/depends_on" in errors
    assert "container-name" in errors
    assert "volumes/pgdata/driver_opts" in errors


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"preflight", "postgres", "mlflow", "dashboard", "start", "worker"}
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
        for match in _VARIABLE.finditer(text):
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


# --- PostgreSQL and MLflow wiring -----------------------------------------------------------------


def test_postgres_healthcheck_uses_pg_isready_over_tcp(compose: dict[str, Any]) -> None:
    """The image's first-run init serves the socket only: a socket check is healthy before init ends."""
    test = " ".join(compose["services"]["postgres"]["healthcheck"]["test"])
    assert "pg_isready" in test
    assert "-h 127.0.0.1" in test


def test_every_service_that_uses_postgres_waits_until_it_is_healthy(compose: dict[str, Any]) -> None:
    users = [
        name
        for name, service in compose["services"].items()
        if any("@postgres:" in value for value in walk_values(service))
    ]
    assert set(users) >= {"mlflow", "dashboard", "start", "worker"}
    assert [name for name in users if not waits_for(compose["services"][name], "postgres", "service_healthy")] == []


def test_runs_wait_until_mlflow_is_healthy(compose: dict[str, Any]) -> None:
    mlflow = compose["services"]["mlflow"]
    assert "/health" in " ".join(mlflow["healthcheck"]["test"])
    for name in ("start", "worker"):
        assert waits_for(compose["services"][name], "mlflow", "service_healthy"), name


def test_database_urls_carry_no_password_and_use_pgpassword(compose: dict[str, Any], env: dict[str, str]) -> None:
    for name, service in compose["services"].items():
        environment = service_environment(service)
        urls = [value for value in walk_values(service) if value.startswith("postgresql")]
        for url in urls:
            parsed = make_url(url)
            assert parsed.password is None, f"{name}: password inside {url}"
            assert (parsed.drivername, parsed.host, parsed.port) == ("postgresql+psycopg2", "postgres", 5432)
            assert parsed.username == env["POSTGRES_USER"]
        if urls:
            assert environment.get("PGPASSWORD") == env["POSTGRES_PASSWORD"], f"{name}: no PGPASSWORD for libpq"


def test_optuna_and_mlflow_get_separate_databases(compose: dict[str, Any], env: dict[str, str]) -> None:
    """Both keep an alembic_version table: in one database each would take the other's for its own."""
    services = compose["services"]
    backend = make_url(option(services["mlflow"]["command"], "--backend-store-uri"))
    storages = {make_url(service_environment(s)["SEARCH_STORAGE"]).database for s in services.values()
                if "SEARCH_STORAGE" in service_environment(s)}  # fmt: skip
    assert storages == {env["POSTGRES_DB"]}
    assert backend.database == env["MLFLOW_DB"] != env["POSTGRES_DB"]
    assert service_environment(services["postgres"])["MLFLOW_DB"] == env["MLFLOW_DB"], "init script needs it"
    initdb = [v for v in services["postgres"]["volumes"] if v.split(":")[1] == "/docker-entrypoint-initdb.d"]
    assert initdb and (DOCKER_DIR / initdb[0].split(":")[0]).is_dir()


def test_clients_reach_the_services_that_compose_defines(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("dashboard", "start", "worker"):
        environment = service_environment(services[name])
        assert environment["SEARCH_TRACKING_URI"] == "http://mlflow:5000", name
        assert make_url(environment["SEARCH_STORAGE"]).host == "postgres", name
    allowed = option(services["mlflow"]["command"], "--allowed-hosts").split(",")
    assert "mlflow:5000" in allowed, "MLflow would refuse requests addressed to http://mlflow:5000"


def test_mlflow_serves_artifacts_from_a_named_volume(compose: dict[str, Any]) -> None:
    mlflow = compose["services"]["mlflow"]
    assert "--serve-artifacts" in mlflow["command"]
    destination = option(mlflow["command"], "--artifacts-destination")
    assert destination in named_volume_mounts(mlflow).values()
    assert option(compose["services"]["start"]["command"], "--artifact-location").startswith("mlflow-artifacts:/")


def test_state_lives_in_declared_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        assert set(named_volume_mounts(service)) <= declared, f"{name} mounts an undeclared volume"
    assert "/var/lib/postgresql/data" in named_volume_mounts(compose["services"]["postgres"]).values()


def test_ports_are_published_on_loopback_by_default(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            parts = str(port).split(":")
            assert len(parts) == 3 and parts[0] == "127.0.0.1", f"{name} publishes {port} beyond this host"


# --- what compose refuses and what it keeps to this host ---------------------------------------------


def _preflight(password: str | None) -> subprocess.CompletedProcess[str]:
    """The preflight service's check, run as its container runs it (``sh SCRIPT``, the password in the environment)."""
    if shutil.which("sh") is None:
        pytest.fail("needs a POSIX sh, as the preflight container has")
    env = {"PATH": "/usr/bin:/bin"} | ({} if password is None else {"POSTGRES_PASSWORD": password})
    script = DOCKER_DIR / "preflight" / "check-settings.sh"
    return subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("password", ["change-me", "", None], ids=["placeholder", "empty", "unset"])
def test_preflight_refuses_the_placeholder_password_with_one_line(password: str | None, env: dict[str, str]) -> None:
    assert env["POSTGRES_PASSWORD"] == "change-me", "the check below must match what .env.example ships"
    refused = _preflight(password)
    assert refused.returncode != 0
    assert refused.stdout == "" and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "POSTGRES_PASSWORD" in refused.stderr and "docker/.env" in refused.stderr


def test_preflight_lets_a_real_password_through_without_printing_it() -> None:
    password = "9f2c1e7b0a4d58e3c6b1f0a27d9e4c83"
    accepted = _preflight(password)
    assert (accepted.returncode, accepted.stdout, accepted.stderr) == (0, "", "")


def _dependencies(services: dict[str, Any], name: str) -> set[str]:
    direct = set(services[name].get("depends_on") or {})
    return direct.union(*(_dependencies(services, d) for d in direct))


def test_nothing_starts_unless_the_preflight_check_passed(compose: dict[str, Any], env: dict[str, str]) -> None:
    services = compose["services"]
    preflight = services["preflight"]
    assert waits_for(services["postgres"], "preflight", "service_completed_successfully")
    assert [n for n in services if n != "preflight" and "preflight" not in _dependencies(services, n)] == []
    # Compose runs the mounted script with the password that PostgreSQL would be initialised with.
    source, target = preflight["volumes"][0].split(":")[:2]
    script = preflight["entrypoint"][-1]
    assert script.startswith(target + "/") and (DOCKER_DIR / source / script.removeprefix(target + "/")).is_file()
    assert service_environment(preflight)["POSTGRES_PASSWORD"] == service_environment(services["postgres"])[
        "POSTGRES_PASSWORD"] == env["POSTGRES_PASSWORD"]  # fmt: skip
    assert preflight.get("restart") == "no" and preflight.get("network_mode") == "none"


def test_publishing_postgres_and_mlflow_to_other_nodes_keeps_the_dashboard_on_this_host(
    raw_compose: dict[str, Any], env: dict[str, str]
) -> None:
    services = interpolate_tree(raw_compose, env | {"PUBLISH_ADDRESS": "192.0.2.10"})["services"]
    published = {name: [str(p).split(":")[0] for p in s.get("ports", [])] for name, s in services.items()}
    assert published["postgres"] == published["mlflow"] == ["192.0.2.10"]
    assert published["dashboard"] == ["127.0.0.1"]


# --- the workers --------------------------------------------------------------------------------


def test_worker_reserves_gpus_and_can_be_scaled(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert worker["command"][0] == "worker" and option(worker["command"], "--gpus")
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert worker["restart"] == "on-failure", "exit 2 (study not created yet) must retry, exit 0 must not"
    assert "container_name" not in worker, "a fixed name allows one replica only"
    assert "ports" not in worker, "a fixed host port allows one replica only"


def test_start_creates_the_study_and_leaves_the_trials_to_workers(compose: dict[str, Any], env: dict[str, str]) -> None:
    command = compose["services"]["start"]["command"]
    assert command[0] == "start"
    assert option(command, "--study") == env["STUDY"]
    assert option(command, "--trials") == env["TRIALS"]
    assert option(command, "--workers") == "0"
    assert compose["services"]["start"].get("restart", "no") == "no", "a finished search must not start again"


def test_search_services_run_the_image_built_here(raw_compose: dict[str, Any]) -> None:
    for name in ("mlflow", "dashboard", "start", "worker"):
        service = raw_compose["services"][name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
        assert (DOCKER_DIR / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert service["image"] == raw_compose["services"]["worker"]["image"], "one image, built once"


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
