"""The node agent's pod of a GPUNode, as the controller renders it (deployment.md §10 steps 1-2).

`render_hypervisor_pod(inputs, settings)` gives the whole pod `hypervisor-<node>`: the pool's
raw pod template (`componentConfig.hypervisor.podTemplate`, a PodTemplate `{template: ...}` or
a PodTemplateSpec `{metadata, spec}`) with ours merged into it, and label
`tensor-fusion.ai/pod-template-hash` = a hash of everything else in the pod, so any change of
image, template, env or owners is a configuration change (§11).

The hypervisor container is the template's first container (else a new one named
`hypervisor`); other template containers, init containers, volumes and tolerations are kept.
What we set wins over the template: pinning (`nodeName`; the template's `nodeSelector` and
`affinity` are dropped, since the kubelet would refuse a pinned pod they exclude), host PID and
network, DNS policy, priority class, ServiceAccount, grace period, the three host paths, and the
env of §10 step 2. The template's env comes after ours (its own names only) and may set
`TF_LOG_LEVEL` (default `info`). Image: `componentConfig.hypervisor.image`, else the template
container's, else `settings.default_image`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.admission.hashing import stable_hash
from tensorfusion.domain.annotations import COMPONENT_HYPERVISOR, KEYS
from tensorfusion.domain.desired_state.objects import owner_reference
from tensorfusion.domain.label_selector import (
    SelectorError,
    parse_selector,
    selector_matches,
)
from tensorfusion.domain.object_views import Obj, labels_of, name_of, uid_of
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.environment_values import SERVICE_ACCOUNT_TOKEN_FILE

__all__ = [
    "CONTAINER_NAME",
    "DEFAULT_PORT",
    "HOST_PATHS",
    "HypervisorInputs",
    "HypervisorPodSettings",
    "HypervisorTemplateError",
    "MetricsWriteTarget",
    "hardware_metadata_json",
    "hypervisor_pod_name",
    "isolation_mode",
    "metrics_write_target",
    "middleware_image",
    "pod_hash_of",
    "render_hypervisor_pod",
    "scheduling_config_json",
]

CONTAINER_NAME: Final = "hypervisor"
COMMAND: Final = ("tensor-fusion", "hypervisor")
DEFAULT_PORT: Final = 8000
DEFAULT_LOG_LEVEL: Final = "info"
NAME_PREFIX: Final = "hypervisor-"
NAME_LIMIT: Final = 63
PRIORITY_CLASS: Final = "system-node-critical"
GRACE_PERIOD_S: Final = 5
HOST_PATHS: Final = {
    "tensor-fusion-run": "/run/tensor-fusion",
    "device-plugins": "/var/lib/kubelet/device-plugins",
    "pod-resources": "/var/lib/kubelet/pod-resources",
}
"""Volume name → host path, mounted at the same path in the agent's container."""
RUN_DIR: Final = "/run/tensor-fusion"
PEER_CA_VOLUME: Final = "peer-ca"
PEER_CA_DIR: Final = "/etc/tensor-fusion/peer-ca"
"""Where the release CA (`ca.crt` of the webhook Secret) is mounted in an agent pod."""
SHM_DIR: Final = f"{RUN_DIR}/shm"
SHM_SCRIPT: Final = (
    f"set -e; mkdir -p {SHM_DIR}; grep -qs ' {SHM_DIR} ' /proc/mounts || "
    f"mount -t tmpfs -o mode=1777 tensor-fusion-shm {SHM_DIR}"
)
"""Mounts the workers' shared-memory tmpfs once per boot (kept across agent restarts)."""
SHM_VOLUME: Final = "tensor-fusion-shm"
"""The shared-memory tmpfs again, as the agent's `/dev/shm`: the MPS servers its daemon starts
and the workers (which get it from Allocate) share memory through it."""
VENDOR_LIBS_SOURCE: Final = "/build/lib"
COPY_LIBS_SCRIPT: Final = (
    f"set -e; mkdir -p {RUN_DIR}/lib; cp -a {VENDOR_LIBS_SOURCE}/. {RUN_DIR}/lib/"
)
"""Copies the vendor libraries of the middleware image to the host for the workers."""
_DROPPED_SPEC: Final = ("nodeSelector", "affinity", "schedulerName")


class HypervisorTemplateError(ValueError):
    """The pool's hypervisor pod template cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class MetricsWriteTarget:
    """Where node agents write metrics (metrics.md §6.1): base URL, database, cloud login."""

    url: str = ""
    db: str = ""
    user: str = ""
    password_secret: str = ""
    """Cloud mode: the Secret holding the password (referenced, never copied into the pod)."""
    password_key: str = "password"
    token_file: str = ""
    """`TF_METRICS_WRITE_TOKEN_FILE`: the ServiceAccount token, for the embedded store only
    (GreptimeDB never gets an agent's token)."""
    ca_secret: str = ""
    """The Secret whose `ca.crt` verifies the controller's peer port (the webhook Secret),
    mounted at `PEER_CA_DIR`; "" for none."""


@dataclass(frozen=True, slots=True)
class HypervisorPodSettings:
    """What the controller puts into every agent pod, from its own environment."""

    namespace: str
    default_image: str
    service_account: str = "tensor-fusion-hypervisor-sa"
    isolation_policy: str = "Static"
    detect_in_used_gpus: bool = False
    metrics: MetricsWriteTarget = field(default_factory=MetricsWriteTarget)


@dataclass(frozen=True, slots=True)
class HypervisorInputs:
    """The objects one agent pod is rendered from (JSON texts already encoded)."""

    gpu_node: Obj
    node: Obj
    pool: Obj
    hardware_metadata: str = ""
    """`TF_PROVIDER_HARDWARE_METADATA` (`hardware_metadata_json`), "" for none."""
    scheduling_config: str = ""
    """`TF_HYPERVISOR_SCHEDULING_CONFIG` (`scheduling_config_json`), "" for none."""
    metrics_extra_labels: str = ""
    """`TF_HYPERVISOR_METRICS_EXTRA_LABELS` (JSON of `metricsExtraPodLabels`), "" for none."""
    middleware_image: str = ""
    """The vendor's middleware image (`middleware_image`): the vendor-library copy's init
    container; "" for none."""


def metrics_write_target(env: ControllerEnvironment) -> MetricsWriteTarget:
    """The agents' write target from the controller's `TSDB_*` env: GreptimeDB (cloud: HTTPS
    with the user and the password's Secret), else the embedded store behind the peer port
    (HTTPS, the release CA, the agent's token) of the controller's Service
    `<TF_RELEASE_FULLNAME>.<namespace>.svc`."""
    tsdb = env.tsdb
    if not tsdb.greptime:
        service = f"{env.release_fullname}.{env.namespace}.svc"
        return MetricsWriteTarget(url=f"https://{service}:{env.peer_port}", db="public",
                                  token_file=SERVICE_ACCOUNT_TOKEN_FILE,
                                  ca_secret=env.webhook_secret)  # fmt: skip
    if tsdb.is_cloud:
        secret = tsdb.password_secret or f"{env.release_fullname}-greptimedb-secret"
        return MetricsWriteTarget(url=f"https://{tsdb.mysql_host}", db=tsdb.database,
                                  user=tsdb.user, password_secret=secret,
                                  password_key=tsdb.password_secret_key)  # fmt: skip
    return MetricsWriteTarget(url=f"http://{tsdb.mysql_host}:{tsdb.http_port}", db=tsdb.database)


def hypervisor_pod_name(node: str) -> str:
    """`hypervisor-<node>`; beyond 63 characters the node name is cut and a hash appended."""
    name = NAME_PREFIX + node
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    kept = node[: NAME_LIMIT - len(NAME_PREFIX) - len(digest) - 1].rstrip(".-")
    return f"{NAME_PREFIX}{kept}-{digest}"


def _manager(pool: Obj) -> Mapping[str, Any]:
    spec = pool.get("spec")
    manager = spec.get("nodeManagerConfig") if isinstance(spec, Mapping) else None
    return manager if isinstance(manager, Mapping) else {}


def _hypervisor_config(pool: Obj) -> Mapping[str, Any]:
    spec = pool.get("spec")
    components = spec.get("componentConfig") if isinstance(spec, Mapping) else None
    config = components.get("hypervisor") if isinstance(components, Mapping) else None
    return config if isinstance(config, Mapping) else {}


def isolation_mode(pool: Obj, node_labels: Mapping[str, str]) -> str:
    """The node's mode: the first `isolationModeRules` entry whose selector matches the Node's
    labels (a rule whose selector does not parse matches nothing), else
    `defaultIsolationMode` (`soft`)."""
    manager = _manager(pool)
    for i, rule in enumerate(manager.get("isolationModeRules") or ()):
        if not isinstance(rule, Mapping) or not rule.get("mode"):
            continue
        try:
            selector = parse_selector(rule.get("selector"), f"isolationModeRules[{i}].selector")
        except SelectorError:
            continue
        if selector_matches(selector, node_labels):
            return str(rule["mode"])
    return str(manager.get("defaultIsolationMode") or "soft")


def _providers_of(provider_configs: Iterable[Obj], vendor: str) -> list[Obj]:
    return sorted(
        (p for p in provider_configs
         if str((p.get("spec") or {}).get("vendor") or "").lower() == vendor.lower()),
        key=name_of,
    )  # fmt: skip


def hardware_metadata_json(provider_configs: Iterable[Obj], vendor: str) -> str:
    """`spec.hardwareMetadata` of the ProviderConfig of `vendor` (case-insensitive; the first
    by name) as compact JSON; "" when none has any."""
    for provider in _providers_of(provider_configs, vendor):
        metadata = (provider.get("spec") or {}).get("hardwareMetadata")
        if metadata:
            return _json(metadata)
    return ""


def middleware_image(provider_configs: Iterable[Obj], vendor: str) -> str:
    """`spec.images.middleware` of the ProviderConfig of `vendor` (case-insensitive; the first
    by name that has one): a `repository:tag` string or a `{repository, tag}` map; "" when
    none has one."""
    for provider in _providers_of(provider_configs, vendor):
        images = (provider.get("spec") or {}).get("images")
        image = images.get("middleware") if isinstance(images, Mapping) else None
        if isinstance(image, Mapping) and image.get("repository"):
            tag = str(image.get("tag") or "")
            return f"{image['repository']}:{tag}" if tag else str(image["repository"])
        if isinstance(image, str) and image:
            return image
    return ""


def scheduling_config_json(template: Obj | None) -> str:
    """`spec.hypervisor` of the pool's SchedulingConfigTemplate as compact JSON ("" if none)."""
    spec = template.get("spec") if template is not None else None
    hypervisor = spec.get("hypervisor") if isinstance(spec, Mapping) else None
    return _json(hypervisor) if hypervisor else ""


def pod_hash_of(pod: Obj) -> str:
    """The pod's `pod-template-hash` label ("" when absent)."""
    return str(labels_of(pod).get(KEYS.pod_template_hash) or "")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _template(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, spec) of the raw pod template, copied."""
    raw = config.get("podTemplate")
    if raw is None:
        return {}, {}
    if not isinstance(raw, Mapping):
        raise HypervisorTemplateError(
            "componentConfig.hypervisor.podTemplate: must be a PodTemplate or PodTemplateSpec"
        )
    where = "componentConfig.hypervisor.podTemplate"
    if "template" in raw:
        raw, where = raw["template"], where + ".template"
    if not isinstance(raw, Mapping):
        raise HypervisorTemplateError(f"{where}: must be a PodTemplateSpec")
    metadata, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise HypervisorTemplateError(f"{where}: metadata and spec must be objects")
    for key in ("containers", "initContainers", "volumes", "tolerations"):
        value = spec.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(item, Mapping) for item in value)
        ):
            raise HypervisorTemplateError(f"{where}.spec.{key}: must be a list of objects")
    return copy.deepcopy(dict(metadata)), copy.deepcopy(dict(spec))


def _env(inputs: HypervisorInputs, settings: HypervisorPodSettings, port: int) -> list[Any]:
    node = name_of(inputs.gpu_node)
    pool = str(labels_of(inputs.gpu_node).get(KEYS.managed_by) or name_of(inputs.pool))
    mode = isolation_mode(inputs.pool, labels_of(inputs.node))
    metrics = settings.metrics
    values = [
        ("GPU_NODE_NAME", node),
        ("POD_NAME", None),
        ("TENSOR_FUSION_POOL_NAME", pool),
        ("HYPERVISOR_PORT", str(port)),
        ("DETECT_IN_USED_GPUS", "true" if settings.detect_in_used_gpus else "false"),
        ("TF_ISOLATION_MODE_POLICY", settings.isolation_policy),
        ("TF_ISOLATION_MODE", mode),
        ("TF_PROVIDER_HARDWARE_METADATA", inputs.hardware_metadata),
        ("TF_HYPERVISOR_SCHEDULING_CONFIG", inputs.scheduling_config),
        ("TF_HYPERVISOR_METRICS_EXTRA_LABELS", inputs.metrics_extra_labels),
        ("TF_METRICS_WRITE_URL", metrics.url),
        ("TF_METRICS_WRITE_DB", metrics.db),
        ("TF_METRICS_WRITE_USER", metrics.user),
        ("TF_METRICS_WRITE_TOKEN_FILE", metrics.token_file),
        ("TF_METRICS_WRITE_CA_FILE", f"{PEER_CA_DIR}/ca.crt" if metrics.ca_secret else ""),
    ]
    env: list[Any] = []
    for name, value in values:
        if name == "POD_NAME":
            env.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        elif value:
            env.append({"name": name, "value": value})
    if metrics.password_secret:
        env.append({"name": "TF_METRICS_WRITE_PASSWORD", "valueFrom": {"secretKeyRef": {
            "name": metrics.password_secret, "key": metrics.password_key}}})  # fmt: skip
    return env


def _merge_env(ours: list[Any], template: Sequence[Any]) -> list[Any]:
    """Ours first; then the template's own names; `TF_LOG_LEVEL=info` unless the template sets
    it."""
    names = {item["name"] for item in ours}
    merged = ours + [item for item in template
                     if isinstance(item, Mapping) and item.get("name") not in names]  # fmt: skip
    if not any(isinstance(item, Mapping) and item.get("name") == "TF_LOG_LEVEL" for item in merged):
        merged.append({"name": "TF_LOG_LEVEL", "value": DEFAULT_LOG_LEVEL})
    return merged


def _by_name(template: Sequence[Any], ours: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The template's items, those named like one of ours replaced by it, ours appended."""
    names = {item["name"] for item in ours}
    return [item for item in template if item.get("name") not in names] + list(ours)


def _container(
    inputs: HypervisorInputs,
    settings: HypervisorPodSettings,
    template: Mapping[str, Any],
    config: Mapping[str, Any],
    port: int,
) -> dict[str, Any]:
    container = copy.deepcopy(dict(template))
    container.setdefault("name", CONTAINER_NAME)
    container["image"] = str(config.get("image") or container.get("image") or
                             settings.default_image)  # fmt: skip
    if not container.get("command") and not container.get("args"):
        container["command"] = list(COMMAND)
    container["env"] = _merge_env(_env(inputs, settings, port), container.get("env") or ())
    mounts: list[dict[str, Any]] = [{"name": name, "mountPath": path}
                                    for name, path in HOST_PATHS.items()]  # fmt: skip
    mounts[0]["mountPropagation"] = "HostToContainer"  # sees the shared-memory tmpfs
    mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if settings.metrics.ca_secret:
        mounts.append({"name": PEER_CA_VOLUME, "mountPath": PEER_CA_DIR, "readOnly": True})
    container["volumeMounts"] = _by_name(container.get("volumeMounts") or (), mounts)
    container.setdefault("ports", [{"name": "http", "containerPort": port, "protocol": "TCP"}])
    container.setdefault(
        "readinessProbe",
        {"httpGet": {"path": "/readyz", "port": port}, "periodSeconds": 10, "failureThreshold": 3},
    )
    container.setdefault("livenessProbe", {"httpGet": {"path": "/healthz", "port": port},
                                           "initialDelaySeconds": 15, "periodSeconds": 20,
                                           "failureThreshold": 5})  # fmt: skip
    container.setdefault("securityContext", {"privileged": True})
    return container


def _init_containers(
    inputs: HypervisorInputs, agent_image: str, template: Sequence[Any]
) -> list[Any]:
    """Ours first (the shared-memory tmpfs, then the vendor libraries when the vendor has a
    middleware image), then the template's of other names."""
    run = {"name": "tensor-fusion-run", "mountPath": RUN_DIR, "mountPropagation": "Bidirectional"}
    ours: list[dict[str, Any]] = [{
        "name": "init-shm", "image": agent_image, "command": ["sh", "-c", SHM_SCRIPT],
        "securityContext": {"privileged": True}, "volumeMounts": [run],
    }]  # fmt: skip
    if inputs.middleware_image:
        ours.append({
            "name": "copy-vendor-libs", "image": inputs.middleware_image,
            "command": ["sh", "-c", COPY_LIBS_SCRIPT],
            "volumeMounts": [{"name": "tensor-fusion-run", "mountPath": RUN_DIR}],
        })  # fmt: skip
    names = {item["name"] for item in ours}
    return ours + [item for item in template if item.get("name") not in names]


def render_hypervisor_pod(
    inputs: HypervisorInputs, settings: HypervisorPodSettings
) -> dict[str, Any]:
    """The agent pod of `inputs.gpu_node`, hash label included (`HypervisorTemplateError` when
    the pool's template cannot be used)."""
    node = name_of(inputs.gpu_node)
    pool = str(labels_of(inputs.gpu_node).get(KEYS.managed_by) or name_of(inputs.pool))
    config = _hypervisor_config(inputs.pool)
    port = int(config.get("portNumber") or DEFAULT_PORT)
    metadata, spec = _template(config)
    for key in _DROPPED_SPEC:
        spec.pop(key, None)
    containers = list(spec.get("containers") or ())
    first = containers[0] if containers else {}
    agent = _container(inputs, settings, first, config, port)
    spec["containers"] = [agent, *containers[1:]]
    spec["initContainers"] = _init_containers(inputs, agent["image"],
                                              spec.get("initContainers") or ())  # fmt: skip
    volumes: list[dict[str, Any]] = [
        {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
        for name, path in HOST_PATHS.items()
    ]
    # DirectoryOrCreate: volumes are set up before init-shm mounts the tmpfs there; the agent
    # container is created after it, so its bind sees the tmpfs.
    volumes.append({"name": SHM_VOLUME, "hostPath": {"path": SHM_DIR, "type": "DirectoryOrCreate"}})
    if settings.metrics.ca_secret:
        # ca.crt only (never the key); optional: a Secret without it leaves the agent on the
        # system's CAs, which then fail to verify the peer port (logged), never a stuck pod.
        volumes.append({"name": PEER_CA_VOLUME, "secret": {
            "secretName": settings.metrics.ca_secret, "optional": True,
            "items": [{"key": "ca.crt", "path": "ca.crt"}]}})  # fmt: skip
    spec["volumes"] = _by_name(spec.get("volumes") or (), volumes)
    spec["tolerations"] = [*(spec.get("tolerations") or ()), {"operator": "Exists"}]
    spec.update({
        "nodeName": node, "hostPID": True, "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet", "priorityClassName": PRIORITY_CLASS,
        "serviceAccountName": settings.service_account, "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": GRACE_PERIOD_S, "enableServiceLinks": False,
        "restartPolicy": "Always",
    })  # fmt: skip
    labels = {**dict(metadata.get("labels") or {}), KEYS.component: COMPONENT_HYPERVISOR,
              KEYS.pool_member_label(pool): "true"}  # fmt: skip
    node_owner = {"apiVersion": "v1", "kind": "Node", "name": name_of(inputs.node),
                  "uid": uid_of(inputs.node)}  # fmt: skip
    pod_metadata: dict[str, Any] = {
        "name": hypervisor_pod_name(node),
        "namespace": settings.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(inputs.gpu_node, "GPUNode"), node_owner],
    }
    if metadata.get("annotations"):
        pod_metadata["annotations"] = dict(metadata["annotations"])
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata,
                           "spec": spec}  # fmt: skip
    labels[KEYS.pod_template_hash] = stable_hash(pod)
    return pod
