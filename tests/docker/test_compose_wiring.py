"""docker/compose.yaml wired the way a deployment needs: PostgreSQL and MLflow healthy before their
clients, separate databases, no password in a URL, state in named volumes, ports on loopback, a
preflight check that refuses the placeholder password, and workers that scale."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from compose_helpers import (
    DOCKER_DIR,
    interpolate_tree,
    named_volume_mounts,
    option,
    service_environment,
    waits_for,
    walk_values,
)
from sqlalchemy.engine import make_url

# --- PostgreSQL and MLflow wiring -----------------------------------------------------------------


def test_postgres_healthcheck_uses_pg_isready_over_tcp(compose: dict[str, Any]) -> None:
    """The image's first-run init serves the socket only: a socket check is healthy before init ends."""
    test = " ".join(compose["services"]["postgres"]["healthcheck"]["test"])
    assert "pg_isready" in test
    assert "-h 127.0.0.1" in test


def test_every_service_that_uses_postgres_waits_until_it_is_healthy(compose: dict[str, Any]) -> None:
    """Directly (MLflow's server) or through PgBouncer (the studies), which waits for PostgreSQL itself."""
    services = compose["services"]
    for server, expected in (("postgres", {"mlflow"}), ("pgbouncer", {"dashboard", "start", "worker"})):
        users = [name for name, service in services.items() if any(f"@{server}:" in v for v in walk_values(service))]
        assert set(users) >= expected, server
        assert [name for name in users if not waits_for(services[name], server, "service_healthy")] == []
    assert waits_for(services["pgbouncer"], "postgres", "service_healthy")
    assert service_environment(services["pgbouncer"])["DB_HOST"] == "postgres"
    assert service_environment(services["pgbouncer"])["POOL_MODE"] == "transaction"


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
            assert parsed.drivername == "postgresql+psycopg2" and parsed.port == 5432
            assert parsed.host in ("postgres", "pgbouncer")
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
        assert make_url(environment["SEARCH_STORAGE"]).host == "pgbouncer", name
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
