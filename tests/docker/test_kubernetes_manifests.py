"""docker/kubernetes/: valid against Kubernetes' own schemas, wired as a deployment needs, free of secrets.

No cluster here: every resource is validated offline (kubernetes-validate bundles the API schemas,
strict: an unknown field is an error), then checked for what the schemas cannot say.
"""

from __future__ import annotations

import copy
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


# -- the `restricted` Pod Security Standard ---------------------------------------------------------
# Its controls (https://kubernetes.io/docs/concepts/security/pod-security-standards/, baseline and
# restricted, as of Kubernetes 1.33), checked on a pod spec as the PodSecurity admission plugin does.

_BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                          "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip
_SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                 "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                 "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                 "net.ipv4.tcp_keepalive_probes"}  # fmt: skip
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}  # fmt: skip
_SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _baseline_violations(spec: dict[str, Any], pod: dict[str, Any], containers: list[dict[str, Any]]) -> list[str]:
    found = [f"spec.{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    found += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    found += [f"sysctl {s['name']}" for s in pod.get("sysctls", []) if s["name"] not in _SAFE_SYSCTLS]
    for where, context in [("pod", pod), *((c["name"], c.get("securityContext", {})) for c in containers)]:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}: hostProcess")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"{where}: seccomp Unconfined")
        if (context.get("appArmorProfile") or {}).get("type", "RuntimeDefault") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}: AppArmor profile")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type") not in _SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"{where}: SELinux options")
    for container in containers:
        name, context = container["name"], container.get("securityContext", {})
        found += [f"{name}: privileged"] * bool(context.get("privileged"))
        found += [f"{name}: procMount"] * (context.get("procMount", "Default") != "Default")
        found += [f"{name}: adds {c}" for c in (context.get("capabilities") or {}).get("add", [])
                  if c not in _BASELINE_CAPABILITIES]  # fmt: skip
        found += [f"{name}: hostPort"] * any(p.get("hostPort") for p in container.get("ports", []))
    return found


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What keeps a pod spec out of the ``restricted`` profile; empty when it passes."""
    pod = spec.get("securityContext", {})
    containers = [*spec.get("initContainers", []), *spec["containers"], *spec.get("ephemeralContainers", [])]
    found = _baseline_violations(spec, pod, containers)
    found += [f"volume {v['name']}: type {sorted(set(v) - {'name'})}" for v in spec.get("volumes", [])
              if not set(v) - {"name"} <= _RESTRICTED_VOLUMES]  # fmt: skip
    found += ["pod: runAsUser 0"] * (pod.get("runAsUser") == 0)
    for container in containers:
        name, context = container["name"], container.get("securityContext", {})
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot must be true (pod or container)")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities must drop ALL")
        found += [f"{name}: adds {c}" for c in capabilities.get("add", []) if c != "NET_BIND_SERVICE"]
    return found


@pytest.mark.parametrize("name_spec", _pod_specs(), ids=lambda ns: ns[0])
def test_every_pod_passes_the_restricted_pod_security_standard(name_spec):
    name, spec = name_spec
    assert restricted_violations(spec) == [], name


def test_the_restricted_check_finds_what_the_admission_plugin_refuses():
    compliant = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}],
    }  # fmt: skip
    assert restricted_violations(compliant) == []
    cases = {
        "allowPrivilegeEscalation": lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "runAsNonRoot": lambda s: s["securityContext"].pop("runAsNonRoot"),
        "seccompProfile": lambda s: s["securityContext"].pop("seccompProfile"),
        "drop ALL": lambda s: s["containers"][0]["securityContext"].pop("capabilities"),
        "adds SYS_ADMIN": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "hostPath": lambda s: s.update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        "hostNetwork": lambda s: s.update(hostNetwork=True),
        "privileged": lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        "init": lambda s: s.update(initContainers=[{"name": "init"}]),  # init containers count too
    }
    for what, break_it in cases.items():
        spec = copy.deepcopy(compliant)
        break_it(spec)
        assert restricted_violations(spec) != [], what


# -- resources ------------------------------------------------------------------------------------

_UNITS = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _quantity(value: Any) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value)).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def test_every_container_requests_and_is_limited_in_cpu_and_memory():
    for name, spec in _pod_specs():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            resources = container.get("resources", {})
            requests, limits = resources.get("requests", {}), resources.get("limits", {})
            for kind in ("cpu", "memory"):
                assert kind in requests and kind in limits, (name, container["name"], kind)
                assert _quantity(requests[kind]) <= _quantity(limits[kind]), (name, container["name"], kind)
        # A memory-backed /dev/shm is charged to the container's memory: it must fit under the limit.
        for volume in spec.get("volumes", []):
            size = (volume.get("emptyDir") or {}).get("sizeLimit")
            if size and volume["emptyDir"].get("medium") == "Memory":
                limit = _quantity(spec["containers"][0]["resources"]["limits"]["memory"])
                assert _quantity(size) < limit, (name, volume["name"])


# -- who may reach whom -------------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    operators = {"In": lambda v, vs: v in vs, "NotIn": lambda v, vs: v not in vs,
                 "Exists": lambda v, vs: v is not None, "DoesNotExist": lambda v, vs: v is None}  # fmt: skip
    matched = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
    return matched and all(operators[e["operator"]](labels.get(e["key"]), e.get("values", []))
                           for e in selector.get("matchExpressions") or [])  # fmt: skip


def reachable(policies: list[dict[str, Any]], source: dict[str, str], target: dict[str, str], port: int) -> bool:
    """Whether a pod labelled ``source`` may connect to ``target``'s TCP ``port``, both in the
    namespace of ``policies`` (NetworkPolicy semantics: a pod no Ingress policy selects takes
    everything; one that some select takes the union of their rules)."""
    selecting = [p["spec"] for p in policies if _selects(p["spec"]["podSelector"], target)
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]  # fmt: skip
    if not selecting:
        return True
    for rule in (rule for spec in selecting for rule in spec.get("ingress", [])):
        peers = rule.get("from")
        assert all(set(peer) == {"podSelector"} for peer in peers or []), "only same-namespace pod peers here"
        from_ok = not peers or any(_selects(peer["podSelector"], source) for peer in peers)
        ports_ok = not rule.get("ports") or any(p.get("port") == port and p.get("protocol", "TCP") == "TCP"
                                                for p in rule["ports"])  # fmt: skip
        if from_ok and ports_ok:
            return True
    return False


def test_only_the_pods_that_use_them_reach_postgres_and_mlflow():
    policies = [doc for _, doc in _resources() if doc["kind"] == "NetworkPolicy"]
    pods = {name: spec_labels for name, spec_labels in _pod_labels()}
    assert set(pods) == {"postgres", "pgbouncer", "mlflow", "dashboard", "start", "workers"}
    stranger = {"app.kubernetes.io/name": "debug-shell"}
    to_postgres = {name for name, labels in pods.items() if reachable(policies, labels, pods["postgres"], 5432)}
    assert to_postgres == {"pgbouncer", "mlflow"}  # the studies' pods through PgBouncer
    to_pgbouncer = {name for name, labels in pods.items() if reachable(policies, labels, pods["pgbouncer"], 5432)}
    assert to_pgbouncer == {"workers", "start", "dashboard"}
    assert not reachable(policies, stranger, pods["postgres"], 5432)
    assert not reachable(policies, stranger, pods["pgbouncer"], 5432)
    to_mlflow = {name for name, labels in pods.items() if reachable(policies, labels, pods["mlflow"], 5000)}
    assert to_mlflow == {"workers", "start"}
    assert not any(reachable(policies, labels, pods["dashboard"], 8080) for labels in [*pods.values(), stranger])
    # Without the policies every pod reaches every other: the check above is the policies' doing.
    assert reachable([], stranger, pods["postgres"], 5432)


def _pod_labels() -> list[tuple[str, dict[str, str]]]:
    return [(doc["metadata"]["name"], doc["spec"]["template"]["metadata"]["labels"]) for _, doc in _resources()
            if doc["kind"] in ("Deployment", "StatefulSet", "Job")]  # fmt: skip


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
    assert config["SEARCH_STORAGE"].split("@")[1].startswith("pgbouncer:5432/")  # pgbouncer.yaml's Service
    start = docs["start"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert start[:1] == ["start"] and start[start.index("--workers") + 1] == "0"


def test_servers_have_probes_and_every_hpsearch_container_uses_one_image():
    images = set()
    for name, spec in _pod_specs():
        for container in spec["containers"]:
            if container["image"] not in ("postgres:16", "edoburu/pgbouncer:v1.25.1-p0"):
                images.add(container["image"])
            if name in ("postgres", "pgbouncer", "mlflow", "dashboard"):
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
