"""The agent pod of a GPUNode (deployment.md §10 steps 1-2): name, owners, labels, host
settings, env, the pool template merged in, the hash of the whole pod; and the decisions of
steps 3-5."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tensorfusion.domain.admission.hashing import stable_hash
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pod_decisions import (
    PodAction,
    PodDecision,
    decide_hypervisor_pod,
    most_restarts,
    node_ready,
)
from tensorfusion.domain.desired_state.hypervisor_pods import (
    HypervisorInputs,
    HypervisorPodSettings,
    HypervisorTemplateError,
    MetricsWriteTarget,
    hardware_metadata_json,
    hypervisor_pod_name,
    isolation_mode,
    metrics_write_target,
    middleware_image,
    render_hypervisor_pod,
    scheduling_config_json,
)
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment

SETTINGS = HypervisorPodSettings(
    namespace="tf-sys", default_image="tensorfusion/tensor-fusion-hypervisor:0.1.0",
    isolation_policy="Dynamic",
    metrics=MetricsWriteTarget(url="http://tensor-fusion.tf-sys.svc:8080", db="public"),
)  # fmt: skip


def gpu_node(name: str = "gpu-1", phase: str = "Pending") -> dict[str, Any]:
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUNode",
            "metadata": {"name": name, "uid": "gn-uid",
                         "labels": {KEYS.managed_by: "shared", KEYS.hardware_vendor: "NVIDIA"}},
            "status": {"phase": phase}}  # fmt: skip


def node(ready: str = "True", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "uid": "node-uid", "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}  # fmt: skip


CHEAP_IS_SHARED = {"mode": "shared", "selector": {"matchLabels": {"tier": "cheap"}}}


def pool(**hypervisor: Any) -> dict[str, Any]:
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUPool", "metadata": {"name": "shared"},
            "spec": {"componentConfig": {"hypervisor": hypervisor},
                     "nodeManagerConfig": {"defaultIsolationMode": "hard",
                                           "isolationModeRules": [CHEAP_IS_SHARED]}}}  # fmt: skip


def render(*, settings: HypervisorPodSettings = SETTINGS, **fields: Any) -> dict[str, Any]:
    inputs: dict[str, Any] = {"gpu_node": gpu_node(), "node": node(), "pool": pool(), **fields}
    return render_hypervisor_pod(HypervisorInputs(**inputs), settings)


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in pod["spec"]["containers"][0]["env"]}  # fmt: skip


# ---- name -----------------------------------------------------------------------------------


def test_the_pod_is_named_after_the_node_and_hash_shortened_beyond_63_characters() -> None:
    assert hypervisor_pod_name("gpu-1") == "hypervisor-gpu-1"
    exact = "n" * (63 - len("hypervisor-"))
    assert hypervisor_pod_name(exact) == "hypervisor-" + exact
    long_a = "a." * 30 + "x" * 20 + "-a"
    long_b = "a." * 30 + "x" * 20 + "-b"
    name_a, name_b = hypervisor_pod_name(long_a), hypervisor_pod_name(long_b)
    assert len(name_a) <= 63 and len(name_b) <= 63
    assert name_a != name_b and name_a == hypervisor_pod_name(long_a)
    assert name_a.startswith("hypervisor-a.a.") and ".-" not in name_a and "--" not in name_a


# ---- rendering ------------------------------------------------------------------------------


def test_a_pod_without_a_template_gets_every_fixed_field_owners_labels_and_env() -> None:
    pod = render()
    meta, spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"]) == ("hypervisor-gpu-1", "tf-sys")
    gpu_owner, node_owner = meta["ownerReferences"]
    assert (gpu_owner["kind"], gpu_owner["name"], gpu_owner["uid"], gpu_owner["controller"]) == (
        "GPUNode", "gpu-1", "gn-uid", True)  # fmt: skip
    assert node_owner == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "node-uid"}
    labels = meta["labels"]
    assert labels == {KEYS.component: "hypervisor", KEYS.pool_member_label("shared"): "true",
                      KEYS.pod_template_hash: labels[KEYS.pod_template_hash]}  # fmt: skip
    assert {k: spec[k] for k in ("nodeName", "hostPID", "hostNetwork", "dnsPolicy",
                                 "priorityClassName", "serviceAccountName",
                                 "terminationGracePeriodSeconds")} == {
        "nodeName": "gpu-1", "hostPID": True, "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet", "priorityClassName": "system-node-critical",
        "serviceAccountName": "tensor-fusion-hypervisor-sa", "terminationGracePeriodSeconds": 5,
    }  # fmt: skip
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {
        "/run/tensor-fusion",
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/pod-resources",
        "/run/tensor-fusion/shm",
    }
    [container] = spec["containers"]
    assert container["image"] == "tensorfusion/tensor-fusion-hypervisor:0.1.0"
    assert container["command"] == ["tensor-fusion", "hypervisor"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    # Each host path at the same path, but the shared memory, which is the agent's /dev/shm
    # (the MPS servers its daemon starts share it with the workers).
    same_path = {path for name, path in host_paths.items() if name != "tensor-fusion-shm"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {*same_path, "/dev/shm"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}
    assert env_of(pod) == {
        "GPU_NODE_NAME": "gpu-1", "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "TENSOR_FUSION_POOL_NAME": "shared", "HYPERVISOR_PORT": "8000",
        "DETECT_IN_USED_GPUS": "false", "TF_ISOLATION_MODE_POLICY": "Dynamic",
        "TF_ISOLATION_MODE": "hard", "TF_METRICS_WRITE_URL": "http://tensor-fusion.tf-sys.svc:8080",
        "TF_METRICS_WRITE_DB": "public", "TF_LOG_LEVEL": "info",
    }  # fmt: skip


def test_the_hash_covers_the_whole_rendered_pod_and_any_input_changes_it() -> None:
    pod = render()
    label = pod["metadata"]["labels"].pop(KEYS.pod_template_hash)
    assert label == stable_hash(pod)
    assert render()["metadata"]["labels"][KEYS.pod_template_hash] == label  # deterministic

    def hash_of(**changes: Any) -> str:
        return str(render(**changes)["metadata"]["labels"][KEYS.pod_template_hash])

    variants = [
        hash_of(pool=pool(image="other:1")),
        hash_of(pool=pool(portNumber=8123)),
        hash_of(node=node(tier="cheap")),  # another isolation mode
        hash_of(hardware_metadata='[{"model":"H100","fp16TFlops":"989"}]'),
        hash_of(middleware_image="tensorfusion/vgpu-provider-nvidia:1.3.9"),
        hash_of(settings=HypervisorPodSettings(namespace="tf-sys", default_image="x:1")),
        hash_of(settings=HypervisorPodSettings(
            namespace="tf-sys", default_image=SETTINGS.default_image,
            isolation_policy="Dynamic", detect_in_used_gpus=True, metrics=SETTINGS.metrics)),
    ]  # fmt: skip
    assert len({label, *variants}) == len(variants) + 1


@pytest.mark.parametrize("wrapped", [True, False], ids=["PodTemplate", "PodTemplateSpec"])
def test_the_pool_template_is_merged_under_ours(wrapped: bool) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu"}
    template: dict[str, Any] = {
        "metadata": {"labels": {"team": "infra", KEYS.component: "mine"},
                     "annotations": {"note": "kept"}},
        "spec": {
            "nodeSelector": {"zone": "a"},
            "tolerations": [toleration],
            "volumes": [{"name": "device-plugins", "emptyDir": {}},
                        {"name": "extra", "emptyDir": {}}],
            "initContainers": [{"name": "prepare", "image": "busybox:1"}],
            "containers": [
                {"name": "agent", "image": "template-image:2",
                 "resources": {"limits": {"cpu": "1"}},
                 "env": [{"name": "TF_LOG_LEVEL", "value": "debug"},
                         {"name": "GPU_NODE_NAME", "value": "wrong"},
                         {"name": "EXTRA", "value": "1"}],
                 "volumeMounts": [{"name": "extra", "mountPath": "/extra"}]},
                {"name": "sidecar", "image": "sidecar:1"},
            ],
        },
    }  # fmt: skip
    raw = {"template": copy.deepcopy(template)} if wrapped else copy.deepcopy(template)
    pod = render(pool=pool(podTemplate=raw))
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "infra" and meta["labels"][KEYS.component] == "hypervisor"
    assert meta["annotations"] == {"note": "kept"}
    assert "nodeSelector" not in spec and spec["nodeName"] == "gpu-1"
    assert spec["tolerations"] == [toleration, {"operator": "Exists"}]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "extra" in volumes and "hostPath" in volumes["device-plugins"]
    assert [c["name"] for c in spec["initContainers"]] == ["init-shm", "prepare"]
    assert spec["initContainers"][1] == {"name": "prepare", "image": "busybox:1"}
    agent, sidecar = spec["containers"]
    assert sidecar == {"name": "sidecar", "image": "sidecar:1"}
    assert (agent["name"], agent["image"]) == ("agent", "template-image:2")
    assert agent["resources"] == {"limits": {"cpu": "1"}}
    env = env_of(pod)
    assert (env["TF_LOG_LEVEL"], env["GPU_NODE_NAME"], env["EXTRA"]) == ("debug", "gpu-1", "1")
    assert [e["name"] for e in agent["env"]].count("GPU_NODE_NAME") == 1
    assert {m["name"] for m in agent["volumeMounts"]} == {
        "extra",
        "tensor-fusion-run",
        "device-plugins",
        "pod-resources",
        "tensor-fusion-shm",
    }
    assert render(pool=pool(image="pool-image:3", podTemplate=raw))["spec"]["containers"][0][
        "image"] == "pool-image:3"  # fmt: skip


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("not a template", "podTemplate: must be a PodTemplate"),
        ({"template": ["x"]}, "podTemplate.template: must be a PodTemplateSpec"),
        ({"spec": {"containers": {"name": "x"}}}, "spec.containers: must be a list of objects"),
        ({"metadata": "x"}, "metadata and spec must be objects"),
    ],
)
def test_a_template_that_cannot_be_used_is_one_error_naming_the_field(
    template: Any, message: str
) -> None:
    with pytest.raises(HypervisorTemplateError, match=message):
        render(pool=pool(podTemplate=template))


def test_the_isolation_mode_is_the_first_matching_rule_else_the_pool_default() -> None:
    rules = [{"mode": "partitioned", "selector": {"matchExpressions": [
                 {"key": "x", "operator": "In"}]}},  # no values: does not parse, skipped
             {"mode": "shared", "selector": {"matchLabels": {"tier": "cheap"}}},
             {"mode": "soft", "selector": {"matchLabels": {"tier": "cheap"}}}]  # fmt: skip
    spec_pool = {"spec": {"nodeManagerConfig": {"isolationModeRules": rules,
                                                "defaultIsolationMode": "hard"}}}  # fmt: skip
    assert isolation_mode(spec_pool, {"tier": "cheap", "x": "1"}) == "shared"
    assert isolation_mode(spec_pool, {"tier": "gold"}) == "hard"
    assert isolation_mode({"spec": {}}, {}) == "soft"
    assert env_of(render(node=node(tier="cheap")))["TF_ISOLATION_MODE"] == "shared"


def test_hardware_metadata_comes_from_the_provider_config_of_the_node_vendor() -> None:
    metadata = [{"model": "H100", "fp16TFlops": "989"}]
    providers = [
        {"metadata": {"name": "amd"},
         "spec": {"vendor": "AMD", "hardwareMetadata": [{"model": "MI300"}]}},
        {"metadata": {"name": "nvidia-provider"},
         "spec": {"vendor": "nvidia", "hardwareMetadata": metadata}},
    ]  # fmt: skip
    text = hardware_metadata_json(providers, "NVIDIA")
    assert json.loads(text) == metadata and " " not in text
    assert hardware_metadata_json(providers, "Intel") == ""
    assert env_of(render(hardware_metadata=text))["TF_PROVIDER_HARDWARE_METADATA"] == text
    assert "TF_PROVIDER_HARDWARE_METADATA" not in env_of(render())


def test_the_scheduling_template_hypervisor_settings_and_extra_labels_are_passed_as_json() -> None:
    template: dict[str, Any] = {"spec": {"hypervisor": {"autoFreezeAndResume": {}}}}
    text = scheduling_config_json(template)
    assert json.loads(text) == template["spec"]["hypervisor"]
    assert scheduling_config_json({"spec": {}}) == scheduling_config_json(None) == ""
    env = env_of(render(scheduling_config=text, metrics_extra_labels='{"team":"team"}'))
    assert env["TF_HYPERVISOR_SCHEDULING_CONFIG"] == text
    assert env["TF_HYPERVISOR_METRICS_EXTRA_LABELS"] == '{"team":"team"}'


def test_the_metrics_target_follows_the_controller_tsdb_environment() -> None:
    embedded = ControllerEnvironment.from_mapping(
        {"OPERATOR_NAMESPACE": "tf-sys", "TF_RELEASE_FULLNAME": "tensor-fusion-sys"}
    )
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert metrics_write_target(embedded) == MetricsWriteTarget(
        url="https://tensor-fusion-sys.tf-sys.svc:9444", db="public", token_file=token,
        ca_secret="tensor-fusion-webhook-secret")  # fmt: skip
    to_embedded = HypervisorPodSettings(namespace="n", default_image="i:1",
                                        metrics=metrics_write_target(embedded))  # fmt: skip
    pod = render(settings=to_embedded)
    assert env_of(pod)["TF_METRICS_WRITE_TOKEN_FILE"] == token
    # The peer port's CA, and only ca.crt of the Secret (never its keys).
    assert env_of(pod)["TF_METRICS_WRITE_CA_FILE"] == "/etc/tensor-fusion/peer-ca/ca.crt"
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "peer-ca"]
    assert volume["secret"] == {"secretName": "tensor-fusion-webhook-secret", "optional": True,
                                "items": [{"key": "ca.crt", "path": "ca.crt"}]}  # fmt: skip
    [agent] = [c for c in pod["spec"]["containers"] if c["name"] == "hypervisor"]
    assert {"name": "peer-ca", "mountPath": "/etc/tensor-fusion/peer-ca",
            "readOnly": True} in agent["volumeMounts"]  # fmt: skip
    hosted = ControllerEnvironment.from_mapping(
        {"TSDB_MYSQL_HOST": "greptime.db.svc", "TSDB_HTTP_PORT": "4100",
         "TSDB_MYSQL_DATABASE": "metrics"})  # fmt: skip
    assert metrics_write_target(hosted) == MetricsWriteTarget(
        url="http://greptime.db.svc:4100", db="metrics")  # fmt: skip
    # GreptimeDB never gets an agent's ServiceAccount token.
    to_greptime = HypervisorPodSettings(namespace="n", default_image="i:1",
                                        metrics=metrics_write_target(hosted))  # fmt: skip
    assert "TF_METRICS_WRITE_TOKEN_FILE" not in env_of(render(settings=to_greptime))
    assert "TF_METRICS_WRITE_CA_FILE" not in env_of(render(settings=to_greptime))
    cloud = ControllerEnvironment.from_mapping(
        {"TSDB_MYSQL_HOST": "x.greptime.cloud", "TSDB_IS_CLOUD": "true", "TSDB_MYSQL_USER": "me",
         "TSDB_MYSQL_PASSWORD": "secret", "TF_RELEASE_FULLNAME": "tensor-fusion-sys"})  # fmt: skip
    target = metrics_write_target(cloud)
    assert target == MetricsWriteTarget(
        url="https://x.greptime.cloud",
        db="public",
        user="me",
        password_secret="tensor-fusion-sys-greptimedb-secret",
    )
    settings = HypervisorPodSettings(namespace="n", default_image="i:1", metrics=target)
    env = env_of(render(settings=settings))
    assert env["TF_METRICS_WRITE_USER"] == "me"
    assert env["TF_METRICS_WRITE_PASSWORD"] == {"secretKeyRef": {
        "name": "tensor-fusion-sys-greptimedb-secret", "key": "password"}}  # fmt: skip
    assert '"secret"' not in json.dumps(render(settings=settings))  # the password itself


# ---- decisions ------------------------------------------------------------------------------


def agent_pod(hash_: str = "h1", phase: str = "Running", restarts: int = 0,
              init_restarts: int = 0, deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": "hypervisor-gpu-1", "labels": {KEYS.pod_template_hash: hash_}}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return {"metadata": meta, "status": {
        "phase": phase,
        "containerStatuses": [{"name": "hypervisor", "restartCount": restarts}],
        "initContainerStatuses": [{"name": "init-shm", "restartCount": init_restarts}],
    }}  # fmt: skip


def decide(pod: dict[str, Any] | None, *, the_node: dict[str, Any] | None = None,
           phase: str = "Pending", selected: bool = False,
           max_crash: int = 5) -> PodDecision:  # fmt: skip
    return decide_hypervisor_pod(
        gpu_node=gpu_node(phase=phase), node=node() if the_node is None else the_node, pod=pod,
        desired_hash="h1", max_crash_count=max_crash, selected=selected,
    )  # fmt: skip


UPGRADING = node(**{"nvidia.com/gpu-driver-upgrade-state": "upgrade-required"})
UPGRADED = node(**{"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"})


@pytest.mark.parametrize(
    ("pod", "options", "action", "flags"),
    [
        (None, {}, PodAction.CREATE, ""),
        (agent_pod(), {}, PodAction.KEEP, ""),
        (agent_pod(deleting=True), {}, PodAction.WAIT, ""),
        (None, {"the_node": UPGRADING}, PodAction.WAIT, ""),
        (agent_pod(phase="Pending", hash_="old"), {"the_node": UPGRADING}, PodAction.WAIT, ""),
        (None, {"the_node": UPGRADED}, PodAction.CREATE, ""),
        (None, {"the_node": node(ready="False")}, PodAction.WAIT, ""),
        (None, {"the_node": {"metadata": {"name": "gpu-1"}}}, PodAction.WAIT, ""),
        (agent_pod(phase="Pending"), {"the_node": node(ready="Unknown")}, PodAction.DELETE, ""),
        (agent_pod(hash_="old"), {"the_node": node(ready="False")}, PodAction.KEEP, "sync"),
        (agent_pod(phase="Failed"), {}, PodAction.DELETE, ""),
        (agent_pod(restarts=6), {}, PodAction.DELETE, "crash"),
        (agent_pod(init_restarts=6), {}, PodAction.DELETE, "crash"),
        (agent_pod(restarts=5), {}, PodAction.KEEP, ""),
        (agent_pod(restarts=60), {"max_crash": 0}, PodAction.KEEP, ""),
        (agent_pod(hash_="old"), {}, PodAction.DELETE, ""),
        (agent_pod(hash_="old"), {"phase": "Running"}, PodAction.KEEP, "sync"),
        (agent_pod(hash_="old"), {"phase": "Running", "selected": True}, PodAction.DELETE, ""),
        (agent_pod(), {"phase": "Running", "selected": True}, PodAction.KEEP, ""),
    ],
)
def test_decisions(
    pod: dict[str, Any] | None, options: dict[str, Any], action: PodAction, flags: str
) -> None:
    decision = decide(pod, **options)
    assert decision.action is action, decision.reason
    assert decision.crash_loop == ("crash" in flags)
    assert decision.out_of_sync == ("sync" in flags)


def test_a_gone_node_or_a_deleted_gpu_node_waits_for_garbage_collection() -> None:
    assert decide_hypervisor_pod(gpu_node=gpu_node(), node=None, pod=None,
                                 desired_hash="h1").action is PodAction.WAIT  # fmt: skip
    going = {**gpu_node(), "metadata": {**gpu_node()["metadata"], "deletionTimestamp": "t"}}
    assert decide_hypervisor_pod(gpu_node=going, node=node(), pod=None,
                                 desired_hash="h1").action is PodAction.WAIT  # fmt: skip


def test_the_crash_reason_names_the_container_and_its_count() -> None:
    decision = decide(agent_pod(init_restarts=7, restarts=2))
    assert "container init-shm of pod hypervisor-gpu-1 restarted 7 times" in decision.reason
    assert most_restarts({"status": {}}).count == 0
    assert not node_ready({"status": {"conditions": [{"type": "DiskPressure", "status": "True"}]}})


def test_init_containers_mount_the_shared_memory_and_copy_the_vendor_libraries() -> None:
    plain = render()
    [shm] = plain["spec"]["initContainers"]
    assert (shm["name"], shm["image"]) == ("init-shm", plain["spec"]["containers"][0]["image"])
    assert shm["securityContext"] == {"privileged": True}
    assert "mount -t tmpfs" in shm["command"][-1] and "/run/tensor-fusion/shm" in shm["command"][-1]
    assert shm["volumeMounts"] == [{"name": "tensor-fusion-run", "mountPath": "/run/tensor-fusion",
                                    "mountPropagation": "Bidirectional"}]  # fmt: skip
    agent_run = next(m for m in plain["spec"]["containers"][0]["volumeMounts"]
                     if m["name"] == "tensor-fusion-run")  # fmt: skip
    assert agent_run["mountPropagation"] == "HostToContainer"
    vendor = render(middleware_image="tensorfusion/vgpu-provider-nvidia:1.3.9")
    _, copy_libs = vendor["spec"]["initContainers"]
    assert (copy_libs["name"], copy_libs["image"]) == (
        "copy-vendor-libs", "tensorfusion/vgpu-provider-nvidia:1.3.9")  # fmt: skip
    assert "/run/tensor-fusion/lib" in copy_libs["command"][-1]


def test_the_middleware_image_is_the_vendors_as_a_string_or_a_map() -> None:
    def provider(name: str, vendor: str, image: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"vendor": vendor, "images": {"middleware": image}},
        }

    mapped = {"repository": "r/m", "tag": "1.3.9"}
    providers = [provider("b", "NVIDIA", "b:2"), provider("a", "nvidia", mapped),
                 provider("c", "AMD", "amd:1")]  # fmt: skip
    assert middleware_image(providers, "NVIDIA") == "r/m:1.3.9"
    assert middleware_image(providers[:1], "nvidia") == "b:2"
    assert middleware_image(providers, "Intel") == ""
