"""The Docker tests: static checks of docker/ (no Docker engine), and a loopback topology."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# The helpers module sits next to the tests.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from compose_helpers import COMPOSE_FILE, ENV_EXAMPLE, SCHEMA_FILE, interpolate_tree, read_env_file  # noqa: E402

# docker/compose.yaml and docker/.env.example as the Compose tests read them.


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
