"""docker/kubernetes/: valid against Kubernetes' own schemas, wired as a deployment needs, free of secrets.

No cluster here: every resource is validated offline (kubernetes-validate bundles the API schemas,
strict: an unknown field is an error), then checked for what the schemas cannot say.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

K8S_DIR = Path(__file__).resolve().parents[2] / "docker" / "kubernetes"
K8S_VERSION = "1.33.0"
_SECRET_NAME = re.compile(r"passw(or)?d|secret|token|api_?key|credential", re.IGNORECASE)
_PASSWORD_IN_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@")


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())


def _resources() -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name in _kustomization()["resources"]
            for doc in yaml.safe_load_all((K8S_DIR / name).read_text()) if doc]  # fmt: skip


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [(doc["metadata"]["name"], doc["spec"]["template"]["spec"]) for _, doc in _resources()
            if doc["kind"] in ("Deployment", "StatefulSet", "Job")]  # fmt: skip


def test_the_kustomization_lists_every_manifest():
    listed = set(_kustomization()["resources"])
    assert listed == {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize(
    "name_doc", _resources(), ids=lambda nd: f"{nd[0]}:{nd[1]['kind']}/{nd[1]['metadata']['name']}"
)
def test_every_resource_is_valid_kubernetes(name_doc):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    _, doc = name_doc
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError with the path


def test_no_secret_is_written_in_the_manifests():
    assert not [doc for _, doc in _resources() if doc["kind"] == "Secret"]  # created by the user, see kustomization
    for name, spec in _pod_specs():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for env in container.get("env", []):
                if _SECRET_NAME.search(env["name"]):
                    assert "secretKeyRef" in env.get("valueFrom", {}), (name, env)
            for arg in [*container.get("args", []), *container.get("command", [])]:
                assert not _PASSWORD_IN_URL.search(arg), (name, arg)
    for _, doc in _resources():
        if doc["kind"] == "ConfigMap":
            for key, value in doc["data"].items():
                assert not _SECRET_NAME.search(key) and not _PASSWORD_IN_URL.search(value), key


def test_every_container_runs_as_non_root_without_privilege_escalation():
    for name, spec in _pod_specs():
        pod = spec.get("securityContext", {})
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            own = container.get("securityContext", {})
            assert own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, (name, container["name"])
            assert own.get("runAsUser", pod.get("runAsUser", 0)) != 0, (name, container["name"])
            assert own.get("allowPrivilegeEscalation") is False, (name, container["name"])


def test_workers_take_gpus_share_checkpoints_and_have_time_to_clean_up():
    docs = {doc["metadata"]["name"]: doc for _, doc in _resources() if doc["kind"] == "Job"}
    workers = docs["workers"]["spec"]
    assert workers["completionMode"] == "Indexed" and workers["parallelism"] == workers["completions"]
    pod = workers["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][:1] == ["worker"] and int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert pod["terminationGracePeriodSeconds"] >= 60  # SIGTERM: stop the trial, queue its retry, exit
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    shared = {doc["metadata"]["name"]: doc for _, doc in _resources() if doc["kind"] == "PersistentVolumeClaim"}
    assert claims == {"checkpoints"} and shared["checkpoints"]["spec"]["accessModes"] == ["ReadWriteMany"]
    config = next(doc for _, doc in _resources() if doc["kind"] == "ConfigMap")["data"]
    assert config["SEARCH_CHECKPOINT_DIR"] == container["volumeMounts"][0]["mountPath"]
    assert int(config["SEARCH_WAIT_FOR_DB"]) > 0 and config["SEARCH_TRACKING_URI"] == "http://mlflow:5000"
    start = docs["start"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert start[:1] == ["start"] and start[start.index("--workers") + 1] == "0"


def test_servers_have_probes_and_every_hpsearch_container_uses_one_image():
    images = set()
    for name, spec in _pod_specs():
        for container in spec["containers"]:
            if container["image"] != "postgres:16":
                images.add(container["image"])
            if name in ("postgres", "mlflow", "dashboard"):
                assert "readinessProbe" in container and "livenessProbe" in container, name
    assert images == {"hpsearch"}  # the kustomization's `images` pins its name and tag
    assert _kustomization()["images"][0]["name"] == "hpsearch"


def test_worker_flags_in_the_manifests_exist():
    """Every flag the manifests pass to `search` is one the CLI knows."""
    from click.testing import CliRunner

    from search.cli._main import cli

    for _, spec in _pod_specs():
        for container in spec["containers"]:
            args = container.get("args", [])
            if container["image"] != "hpsearch" or not args or args[0] not in cli.commands:
                continue
            help_text = CliRunner().invoke(cli, [args[0], "--help"]).output
            for flag in (a for a in args if a.startswith("--")):
                assert flag in help_text, (args[0], flag)
