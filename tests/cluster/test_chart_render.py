"""The chart as `helm template` renders it (deployment.md §1-§7): `helm lint`; the defaults, the
production overlay alone and with each snippet of the production guide (examples/production/),
asserted on the rendered objects; every image pinned; the password only in a Secret; the
scheduler hash moving only with `schedulerConfig`; each rendered `schedulerConfig` through the
controller's own derivation; every object accepted by the API server in a server-side dry run."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.domain.alerting.dynamic_config import parse_dynamic_config
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    derive_kube_scheduler_config,
)
from tensorfusion.domain.scheduling.scheduler_config import (
    read_scheduler_settings,
)

from .chart_render import (
    CHART,
    NAMESPACE,
    PRODUCTION,
    SNIPPETS,
    Rendered,
    env_of,
    helm,
    images,
    render,
)
from .controller_replicas import install_crds
from .controlplane import ControlPlane

pytestmark = pytest.mark.cluster

FULL = "tensor-fusion-sys"
DEPLOYMENT = f"{FULL}-controller"
WEBHOOK = f"{FULL}-mutating-webhook"
HASH_ANNOTATION = "tensor-fusion.ai/scheduler-config-hash"
DEFAULT_COMMAND = ["/manager", "-metrics-bind-address", ":9000", "-leader-elect",
                   "-enable-auto-scale", "-enable-alert", "-enable-auto-expander"]  # fmt: skip


def controller(rendered: Rendered) -> dict[str, Any]:
    return rendered.get("Deployment", DEPLOYMENT)


def controller_container(rendered: Rendered) -> dict[str, Any]:
    [container] = [c for c in controller(rendered)["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "controller"]  # fmt: skip
    return dict(container)


def webhook(rendered: Rendered) -> dict[str, Any]:
    [hook] = rendered.get("MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    return dict(hook)


def config_data(rendered: Rendered) -> dict[str, Any]:
    data = rendered.get("ConfigMap", f"{FULL}-config")["data"]
    return {key: yaml.safe_load(text) for key, text in data.items()}


def pool_spec(rendered: Rendered) -> dict[str, Any]:
    [cluster] = rendered.all("TensorFusionCluster")
    [pool] = cluster["spec"]["gpuPools"]
    return dict(pool["specTemplate"])


def defaults() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


@pytest.fixture(scope="module")
def production() -> Rendered:
    return render(PRODUCTION)


def test_helm_lint_passes_for_the_defaults_and_the_overlay() -> None:
    helm("lint", str(CHART))
    helm("lint", str(CHART), "-f", str(PRODUCTION), "-f", str(SNIPPETS / "embedded-store.yaml"))


def test_the_defaults(default: Rendered) -> None:
    deployment = controller(default)
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["tensor-fusion.ai/component"] == "operator"
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert "preferredDuringSchedulingIgnoredDuringExecution" in (
        pod["spec"]["affinity"]["podAntiAffinity"])  # fmt: skip
    container = controller_container(default)
    assert container["command"] == DEFAULT_COMMAND
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8080, "health": 8081, "metrics": 9000, "webhook": 9443, "peer": 9444}  # fmt: skip
    env = env_of(container)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["TF_RELEASE_FULLNAME"] == FULL
    assert env["TF_ISOLATION_MODE_POLICY"] == "dynamic"
    assert env["TSDB_MYSQL_HOST"] == "greptimedb-standalone.greptimedb.svc.cluster.local"
    assert "NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION" not in env
    assert "TSDB_MYSQL_PASSWORD" not in env
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_mount = mounts["/etc/tensor-fusion/config"]
    assert "subPath" not in config_mount, "a subPath mount never sees ConfigMap updates"
    assert volumes[config_mount["name"]]["configMap"]["name"] == f"{FULL}-config"
    certs = volumes[mounts["/tmp/k8s-webhook-server/serving-certs"]["name"]]
    assert certs["secret"]["optional"] is True
    assert "emptyDir" in volumes[mounts["/var/lib/tensor-fusion/tsdb"]["name"]]

    data = config_data(default)
    values = defaults()
    assert data["config.yaml"] == values["dynamicConfig"]
    assert data["scheduler-config.yaml"] == values["schedulerConfig"]
    parsed = parse_dynamic_config(yaml.safe_dump(data["config.yaml"]), "config.yaml")
    assert len(parsed.rules.rules) == 15 and not parsed.rules.problems and not parsed.problems

    hook = webhook(default)
    assert hook["name"] == "mpod.tensor-fusion.ai"
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Fail", "NoneOnDryRun", 10)  # fmt: skip
    assert hook["objectSelector"] == {"matchExpressions": [
        {"key": "tensor-fusion.ai/enabled", "operator": "In", "values": ["true"]}]}  # fmt: skip
    assert "caBundle" not in hook["clientConfig"], "the controller keeps it"
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["path"]) == (
        f"{FULL}-webhook", NAMESPACE, "/mutate-v1-pod")  # fmt: skip
    webhook_service = default.get("Service", f"{FULL}-webhook")
    assert [(p["port"], p["targetPort"]) for p in webhook_service["spec"]["ports"]] in (
        [(443, 9443)], [(443, "webhook")])  # fmt: skip
    assert default.get("Service", FULL)["spec"]["ports"][0]["port"] == 8080

    alertmanager = default.get("StatefulSet", f"{FULL}-alert-manager")
    assert alertmanager["spec"]["replicas"] == 1
    args = alertmanager["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--cluster.listen-address=" in args, "one replica gossips with nobody"
    assert default.has("StatefulSet", f"{FULL}-greptimedb-standalone")
    assert default.has("Service", "alert-manager")
    headless = default.get("Service", "alert-manager-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in headless["spec"]["ports"]} >= {9093, 9094}
    assert {p["metadata"]["name"] for p in default.all("PriorityClass")} == {
        "tensor-fusion-critical", "tensor-fusion-high", "tensor-fusion-medium"}  # fmt: skip
    assert default.has("ProviderConfig", "nvidia-provider")
    assert default.has("SchedulingConfigTemplate", "tf-scheduling-config")
    [cluster] = default.all("TensorFusionCluster")
    assert cluster["metadata"]["name"] == "tensor-fusion"
    for kept in (cluster, default.get("ProviderConfig", "nvidia-provider")):
        assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    spec = pool_spec(default)
    assert spec["capacityConfig"]["oversubscription"] == {"tflopsOversellRatio": 2000,
                                                          "vramExpandToHostMem": 50,
                                                          "vramExpandToHostDisk": 60}  # fmt: skip
    policy = spec["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    assert (policy["autoUpdateHypervisor"], policy["batchPercentage"]) == (True, 20)
    assert "maintenanceWindow" not in policy
    hypervisor = spec["componentConfig"]["hypervisor"]
    template_env = hypervisor["podTemplate"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TF_LOG_LEVEL", "value": "info"} in template_env
    assert hypervisor["image"] == "tensorfusion/tensor-fusion-hypervisor:0.1.0"


def test_rbac_is_split_by_scope_and_the_job_has_its_own_account(default: Rendered) -> None:
    """Cluster-wide rules hold no Secret, ConfigMap, Lease or pod creation; those are in the
    release namespace's Role, by name where the name is known (every call of the code is
    checked against the API server in test_rbac_review.py)."""
    account = (FULL, NAMESPACE)
    bound = set()
    for binding in default.all("ClusterRoleBinding"):
        subjects = {(s["name"], s.get("namespace")) for s in binding.get("subjects") or ()}
        if account in subjects:
            bound.add(binding["roleRef"]["name"])
    assert bound == {f"{FULL}-role", "system:kube-scheduler", "system:volume-scheduler"}
    cluster_rules = default.get("ClusterRole", f"{FULL}-role")["rules"]
    for rule in cluster_rules:
        resources = rule.get("resources", ())  # none in the peer port's nonResourceURLs rule
        assert "*" not in rule["verbs"] and "*" not in resources, rule
        assert not {"secrets", "configmaps", "leases"} & set(resources), rule
        if "pods" in resources:
            assert "create" not in rule["verbs"]
    role = default.get("Role", f"{FULL}-role")
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert all("create" not in r["verbs"] for r in named)
    assert default.get("RoleBinding", f"{FULL}-kube-scheduler-authentication")["metadata"][
        "namespace"] == "kube-system"  # fmt: skip
    [job] = default.all("Job")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{FULL}-uninstall"
    uninstall = default.get("ClusterRole", f"{FULL}-uninstall")
    assert uninstall["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                                   "verbs": ["get", "list", "patch"]}]  # fmt: skip
    assert uninstall["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    agent = default.get("ServiceAccount", "tensor-fusion-hypervisor-sa")
    assert agent["metadata"]["namespace"] == NAMESPACE
    assert default.has("ValidatingAdmissionPolicy", f"{FULL}-agent-own-node")


def test_the_only_job_is_the_uninstall_hook(default: Rendered, production: Rendered) -> None:
    for rendered in (default, production):
        [job] = rendered.all("Job")
        assert job["metadata"]["name"] == f"{FULL}-uninstall"
        annotations = job["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert "uninstall" in [*container.get("command", []), *container.get("args", [])]


def test_the_controller_and_the_job_run_locked_down(default: Rendered) -> None:
    """Non-root, read-only root with /tmp and the store as emptyDirs, nothing to escalate."""
    [job] = default.all("Job")
    for pod in (controller(default)["spec"]["template"], job["spec"]["template"]):
        context = pod["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["spec"]["containers"]:
            own = container["securityContext"]
            assert own["readOnlyRootFilesystem"] is True
            assert own["allowPrivilegeEscalation"] is False
            assert own["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in controller_container(default)["volumeMounts"]}
    assert {"/tmp", "/var/lib/tensor-fusion/tsdb"} <= mounts
    volumes = {v["name"]: v for v in controller(default)["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["tmp"] and "emptyDir" in volumes["tsdb"]


def test_only_the_controller_and_the_job_carry_a_token(default: Rendered) -> None:
    """Pods that make no API call get no ServiceAccount token (GreptimeDB, Alertmanager)."""
    for kind, name in (("StatefulSet", f"{FULL}-greptimedb-standalone"),
                       ("StatefulSet", f"{FULL}-alert-manager")):  # fmt: skip
        pod = default.get(kind, name)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name


def test_the_console_sidecar_gets_no_controller_token() -> None:
    """The controller's token is projected into its own container only."""
    pod = controller(render(sets={"agent.agentId": "a", "agent.enrollToken": "t"}))
    spec = pod["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    mounts = {c["name"]: {m["mountPath"] for m in c.get("volumeMounts") or ()}
              for c in spec["containers"]}  # fmt: skip
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts["controller"]
    assert not mounts["cluster-agent"], "the sidecar mounts nothing"
    [access] = [v for v in spec["volumes"] if v["name"] == "kube-api-access"]
    sources = access["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"


def test_network_policies_limit_the_api_peer_and_metrics_ports() -> None:
    assert not render(sets={"networkPolicy.enabled": "false"}).all("NetworkPolicy")
    hosted = render()
    controller_policy = hosted.get("NetworkPolicy", f"{FULL}-controller")
    rules = {tuple(p["port"] for p in r["ports"]): r for r in controller_policy["spec"]["ingress"]}
    assert "from" not in rules[("webhook", "health")], "the webhook from anywhere"
    [replicas] = rules[("http",)]["from"]
    assert replicas["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    [replicas] = rules[("peer",)]["from"]  # GreptimeDB: no agent writes to the controller
    assert rules[("metrics",)]["from"] == [{"namespaceSelector": {}}]
    assert hosted.has("NetworkPolicy", f"{FULL}-alert-manager")
    # The embedded store: the agents write to the peer port from node addresses.
    embedded = render(SNIPPETS / "embedded-store.yaml")
    peer = next(r for r in embedded.get("NetworkPolicy", f"{FULL}-controller")["spec"]["ingress"]
                if r["ports"][0]["port"] == "peer")  # fmt: skip
    assert "from" not in peer, "open while no node CIDR is named"
    fenced = render(
        SNIPPETS / "embedded-store.yaml", sets={"networkPolicy.nodeCIDRs": "{10.0.0.0/16}"}
    )
    peer = next(r for r in fenced.get("NetworkPolicy", f"{FULL}-controller")["spec"]["ingress"]
                if r["ports"][0]["port"] == "peer")  # fmt: skip
    assert {"ipBlock": {"cidr": "10.0.0.0/16"}} in peer["from"]


def test_the_public_api_listens_on_loopback_and_peers_use_the_peer_port() -> None:
    deployment = controller(render())
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "controller"]  # fmt: skip
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["API_BIND_HOST"] == "127.0.0.1"
    assert env["PEER_PORT"] == "9444"
    assert {"name": "peer", "containerPort": 9444, "protocol": "TCP"} in container["ports"]
    service = render().get("Service", FULL)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8080, "peer": 9444}


def test_the_production_overlay(production: Rendered) -> None:
    deployment = controller(production)
    assert deployment["spec"]["replicas"] == 2
    assert controller_container(production)["resources"] == {
        "requests": {"cpu": "1000m", "memory": "1Gi"},
        "limits": {"cpu": "4000m", "memory": "4Gi"},
    }
    assert controller_container(production)["command"] == DEFAULT_COMMAND, "command unchanged"
    assert "preferredDuringSchedulingIgnoredDuringExecution" in (
        deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"])  # fmt: skip
    alertmanager = production.get("StatefulSet", f"{FULL}-alert-manager")
    assert alertmanager["spec"]["replicas"] == 3
    [claim] = alertmanager["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    args = " ".join(alertmanager["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.count("--cluster.peer=") == 3, "the replicas gossip"
    assert not production.has("StatefulSet", f"{FULL}-greptimedb-standalone")
    assert "Namespace" not in production.kinds(), "built-in GreptimeDB off, nothing in its place"


@pytest.mark.parametrize("snippet", ["required-anti-affinity", "greptime-cloud",
                                     "greptime-self-hosted", "embedded-store", "alert-receivers",
                                     "external-alertmanager", "progressive-migration",
                                     "rolling-update", "conservative-oversubscription",
                                     "failure-policy-fail"])  # fmt: skip
def test_each_guide_snippet_on_the_overlay(snippet: str) -> None:
    sets = {"greptime.password": "from-the-secret-manager"} if snippet == "greptime-cloud" else {}
    rendered = render(PRODUCTION, SNIPPETS / f"{snippet}.yaml", sets=sets)
    container = controller_container(rendered)
    env = env_of(container)
    pod = controller(rendered)["spec"]["template"]["spec"]
    hook = webhook(rendered)
    if snippet == "required-anti-affinity":
        [term] = pod["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["labelSelector"]["matchExpressions"][0]["values"] == ["operator"]
    elif snippet == "greptime-cloud":
        assert (env["TSDB_IS_CLOUD"], env["TSDB_MYSQL_PORT"], env["TSDB_MYSQL_USER"]) == (
            "true", "5001", "<user>")  # fmt: skip
        assert env["TSDB_MYSQL_PASSWORD"] == {"secretKeyRef": {
            "name": f"{FULL}-greptimedb-secret", "key": "password"}}  # fmt: skip
    elif snippet == "greptime-self-hosted":
        assert (env["TSDB_IS_CLOUD"], env["TSDB_MYSQL_PORT"], env["TSDB_HTTP_PORT"]) == (
            "false", "4002", "4000")  # fmt: skip
        assert "TSDB_MYSQL_PASSWORD" not in env
    elif snippet == "embedded-store":
        assert env["TSDB_MYSQL_HOST"] == ""
    elif snippet == "alert-receivers":
        secret = rendered.get("Secret", f"{FULL}-alert-manager-config")
        text = secret.get("stringData", {}).get("alertmanager.yml") or base64.b64decode(
            secret["data"]["alertmanager.yml"]).decode()  # fmt: skip
        config = yaml.safe_load(text)
        assert config["receivers"][0]["webhook_configs"][0]["url"] == "https://<your-alert-webhook>"
        assert "annotations" in rendered.get("StatefulSet", f"{FULL}-alert-manager")["spec"][
            "template"]["metadata"], "a checksum of the config on the pods"  # fmt: skip
    elif snippet == "external-alertmanager":
        assert not rendered.has("StatefulSet", f"{FULL}-alert-manager")
        address = "http://<alertmanager-service>.<namespace>.svc.cluster.local:9093"
        assert container["command"][-2:] == ["-alert-manager-addr", address]
        assert "-leader-elect" in container["command"]
    elif snippet == "progressive-migration":
        assert env["NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION"] == "true"
        assert "objectSelector" not in hook
        assert hook["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", NAMESPACE]}]}  # fmt: skip
    elif snippet == "rolling-update":
        policy = pool_spec(rendered)["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
        assert (policy["batchPercentage"], policy["batchInterval"],
                policy["autoUpdateWorker"]) == (20, "5m", False)  # fmt: skip
    elif snippet == "conservative-oversubscription":
        assert pool_spec(rendered)["capacityConfig"]["oversubscription"] == {
            "tflopsOversellRatio": 300, "vramExpandToHostMem": 40, "vramExpandToHostDisk": 20,
        }  # fmt: skip
    elif snippet == "failure-policy-fail":
        assert hook["failurePolicy"] == "Fail"
    assert not rendered.all("Job") or [j["metadata"]["name"] for j in rendered.all("Job")] == [
        f"{FULL}-uninstall"]  # fmt: skip


def test_auto_migration_and_failure_policy_ignore_change_the_webhook() -> None:
    migrating = webhook(render(sets={"dynamicConfig.autoMigration.enable": "true"}))
    assert "objectSelector" not in migrating and "namespaceSelector" in migrating
    ignoring = webhook(render(sets={"controller.admissionWebhooks.failurePolicy": "Ignore"}))
    assert ignoring["failurePolicy"] == "Ignore"


def test_appended_rule_keeps_the_built_in_ones(tmp_path: Path) -> None:
    rules = defaults()["dynamicConfig"]["alertRules"]
    appended = yaml.safe_load((SNIPPETS / "alert-rule-appended.yaml").read_text())
    values = tmp_path / "rules.yaml"
    values.write_text(yaml.safe_dump({"dynamicConfig": {"alertRules": [*rules, *appended]}}))
    data = config_data(render(PRODUCTION, values))
    parsed = parse_dynamic_config(yaml.safe_dump(data["config.yaml"]), "config.yaml")
    names = [rule.name for rule in parsed.rules.rules]
    assert len(names) == 16 and names[-1] == "GPUTemperatureWarning"
    assert "{{ .Conditions }}" in data["config.yaml"]["alertRules"][-1]["query"], "verbatim"


def test_no_image_is_untagged_or_latest() -> None:
    variants = [render(), render(PRODUCTION, SNIPPETS / "embedded-store.yaml"),
                render(sets={"agent.agentId": "a", "agent.enrollToken": "t"})]  # fmt: skip
    for rendered in variants:
        for image in images(rendered):
            name = image.rsplit("/", 1)[-1]
            assert ":" in name and not name.endswith(":latest") and not name.endswith(":"), image


def test_the_greptime_password_is_only_in_a_secret() -> None:
    secret_value = "S3cret-from-vault"
    rendered = render(PRODUCTION, SNIPPETS / "greptime-cloud.yaml",
                      sets={"greptime.password": secret_value})  # fmt: skip
    encoded = base64.b64encode(secret_value.encode()).decode()
    holders = [f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects
               if secret_value in yaml.safe_dump(o) or encoded in yaml.safe_dump(o)]  # fmt: skip
    assert holders == [f"Secret/{FULL}-greptimedb-secret"]
    existing = render(PRODUCTION, SNIPPETS / "greptime-cloud.yaml",
                      sets={"greptime.existingSecret": "vault-greptime"})  # fmt: skip
    assert not existing.has("Secret", f"{FULL}-greptimedb-secret")
    env = env_of(controller_container(existing))
    assert env["TSDB_MYSQL_PASSWORD"]["secretKeyRef"]["name"] == "vault-greptime"


def test_the_scheduler_hash_moves_only_with_the_scheduler_config(tmp_path: Path) -> None:
    def hash_of(rendered: Rendered) -> str:
        return str(controller(rendered)["spec"]["template"]["metadata"]["annotations"][
            HASH_ANNOTATION])  # fmt: skip

    base = hash_of(render())
    rules = copy.deepcopy(defaults()["dynamicConfig"]["alertRules"])
    rules[0]["threshold"] = 7
    rule_change = tmp_path / "rules.yaml"
    rule_change.write_text(yaml.safe_dump({"dynamicConfig": {"alertRules": rules}}))
    assert hash_of(render(rule_change)) == base, "a rule change must not roll the controller"
    scheduler = copy.deepcopy(defaults()["schedulerConfig"])
    scheduler["profiles"][0]["pluginConfig"][0]["args"]["maxWorkerPerNode"] = 128
    scheduler_change = tmp_path / "scheduler.yaml"
    scheduler_change.write_text(yaml.safe_dump({"schedulerConfig": scheduler}))
    assert hash_of(render(scheduler_change)) != base


@pytest.mark.parametrize("values", [(), (PRODUCTION, SNIPPETS / "embedded-store.yaml")])
def test_the_rendered_scheduler_config_is_one_the_controller_derives(
    values: tuple[Path, ...],
) -> None:
    config = config_data(render(*values))["scheduler-config.yaml"]
    settings = read_scheduler_settings(config)
    assert settings.scheduler_name == "tensor-fusion-scheduler" and not settings.warnings
    derived, warnings = derive_kube_scheduler_config(
        config, extender_url="http://127.0.0.1:8082/scheduler",
        managed_resources=["nvidia.com/gpu"], kubeconfig="/tmp/kubeconfig",
    )  # fmt: skip
    assert derived["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8082/scheduler"
    assert not warnings


async def test_every_rendered_object_passes_a_server_side_dry_run(
    control_plane: ControlPlane,
) -> None:
    await install_crds(control_plane)
    namespaces = await control_plane.kubectl("get", "namespace", "-o", "name")
    if f"namespace/{NAMESPACE}" not in namespaces.split():
        await control_plane.kubectl("create", "namespace", NAMESPACE)
    variants = {
        "defaults": render(),
        "production": render(PRODUCTION, SNIPPETS / "embedded-store.yaml",
                             SNIPPETS / "alert-receivers.yaml",
                             SNIPPETS / "progressive-migration.yaml"),
        "cloud": render(PRODUCTION, SNIPPETS / "greptime-cloud.yaml",
                        sets={"greptime.password": "p", "agent.agentId": "a",
                              "agent.enrollToken": "t"}),
        "network policy": render(PRODUCTION, SNIPPETS / "embedded-store.yaml",
                                 sets={"networkPolicy.nodeCIDRs": "{10.0.0.0/16}"}),
    }  # fmt: skip
    for name, rendered in variants.items():
        # the greptimedb namespace of the standalone store is created by the same apply
        text = rendered.text
        if rendered.has("Namespace", "greptimedb"):
            await control_plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(
                rendered.get("Namespace", "greptimedb")))  # fmt: skip
        out = await control_plane.kubectl("apply", "--server-side", "--dry-run=server",
                                          "--force-conflicts", "-f", "-", stdin=text)  # fmt: skip
        assert "(server dry run)" in out, name
