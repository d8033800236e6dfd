"""The production guide walked through on a control plane of its own, with the chart installed by
`helm upgrade --install` and its controllers run as the kubelet would run them
(`chart_walkthrough.ChartControllers`: two replicas from the installed Deployment, as its
ServiceAccount, heartbeat readiness, simulated node agents for the agent pods).

Step 1: the overlay alone gives 2 controller replicas and 3 Alertmanagers, no Job, and an
incomplete install (`TimeSeriesDatabaseReady=False`); step 2: `my-values.yaml` selects the
embedded store (no GreptimeDB runs here), the controllers restart from the upgraded Deployment
and the condition turns True; verification: the cluster, pool, GPU nodes and GPUs Running;
step 6: the guide's simulate-schedule body and the allocation dump; the controller logs with
the store line, the child kube-scheduler's lines and no error line; uninstall: the hook's
command strips the finalizer from every pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from lightkube.types import on_error_retry

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.devenv.chart_controllers import point_webhook
from tensorfusion.doctor.live_controller_api import GUIDE_TEST_POD
from tensorfusion.runtime.leader_election import LEASE_NAME

from ..integration.loopback_peers import WebhookReceiver
from .chart_render import CHART, NAMESPACE, PRODUCTION, RELEASE, SNIPPETS
from .chart_walkthrough import (
    ChartAlertmanagers,
    ChartControllers,
    Replica,
    admin_client,
    helm_install,
    own_control_plane,
    simulated_gpu_nodes,
)
from .controller_replicas import EXECUTABLE
from .controlplane import Component, ControlPlane, eventually

pytestmark = pytest.mark.cluster

CLUSTER: Any = resource_of("TensorFusionCluster")
POOL: Any = resource_of("GPUPool")
GPU_NODE: Any = resource_of("GPUNode")
GPU: Any = resource_of("GPU")
SCHEDULER = "tensor-fusion-scheduler"
SIMULATE_BODY = GUIDE_TEST_POD


@pytest.fixture(scope="module")
def walk_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("walkthrough")) as plane:
        yield plane


@pytest.fixture
async def walk_kube(walk_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    async with admin_client(walk_plane, "walkthrough") as client:
        yield client


async def http(method: str, url: str, body: str | None = None,
               content_type: str = "application/json") -> tuple[int, str]:  # fmt: skip
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            url,
            data=body,
            headers={"Content-Type": content_type},
            timeout=aiohttp.ClientTimeout(15),
        ) as reply,  # fmt: skip
    ):
        return reply.status, await reply.text()


def condition(obj: Any, kind: str) -> dict[str, Any]:
    status = (obj.to_dict() if hasattr(obj, "to_dict") else obj).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


def resources(tflops: str, vram: str, tflops_limit: str, vram_limit: str) -> dict[str, str]:
    return {"tensor-fusion.ai/tflops-request": tflops, "tensor-fusion.ai/vram-request": vram,
            "tensor-fusion.ai/tflops-limit": tflops_limit,
            "tensor-fusion.ai/vram-limit": vram_limit}  # fmt: skip


def guide_deployment(enabled_replicas: str, enabled: str) -> dict[str, Any]:
    """The guide's step-5 Deployment: 10 replicas keeping nvidia.com/gpu, TensorFusion for
    `enabled-replicas` of them (Recreate, since no kubelet makes new pods Ready)."""
    annotations = {
        "tensor-fusion.ai/enabled-replicas": enabled_replicas,
        **resources("100", "3Gi", "200", "3Gi"),
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "guide", "namespace": "default"},
        "spec": {
            "replicas": 10, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "guide"}},
            "template": {
                "metadata": {"labels": {"app": "guide", "tensor-fusion.ai/enabled": enabled},
                             "annotations": annotations},
                "spec": {"containers": [{"name": "python", "image": "python:3.11",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            },
        },
    }  # fmt: skip


def tf_pod(name: str) -> dict[str, Any]:
    annotations = resources("10", "1Gi", "10", "1Gi")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations,
                         "labels": {"tensor-fusion.ai/enabled": "true"}},
            "spec": {"containers": [{"name": "c", "image": "python:3.11"}]}}  # fmt: skip


async def point_webhook_at(kube: AsyncClient, replica: Replica,
                           components: list[Component]) -> None:  # fmt: skip
    """The chart's webhook configuration called on the replica's loopback address (its
    certificate names the replicas' addresses, `WEBHOOK_CERT_EXTRA_HOSTS`)."""
    url = f"https://{replica.ip}:{replica.webhook_port}/mutate-v1-pod"
    await point_webhook(kube, url, components)


async def restore_webhook_service(kube: AsyncClient) -> None:
    """The webhook configuration's clientConfig back to the chart's Service, caBundle kept."""
    name = f"{RELEASE}-mutating-webhook"
    body = (await kube.get(MutatingWebhookConfiguration, name)).to_dict()  # type: ignore[no-untyped-call]
    for hook in body["webhooks"]:
        hook["clientConfig"].pop("url", None)
        hook["clientConfig"]["service"] = {"name": f"{RELEASE}-webhook", "namespace": NAMESPACE,
                                           "path": "/mutate-v1-pod", "port": 443}  # fmt: skip
    await kube.replace(MutatingWebhookConfiguration.from_dict(body))  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def confirming_deletions(kube: AsyncClient, namespace: str) -> AsyncIterator[None]:
    """Confirm the deletion of bound pods as their kubelet would (grace period 0)."""

    async def confirm() -> None:
        async for _, pod in kube.watch(Pod, namespace=namespace, on_error=on_error_retry):
            meta, spec = pod.metadata, pod.spec
            if meta and meta.deletionTimestamp and spec and spec.nodeName and meta.name:
                with contextlib.suppress(ApiError):
                    await kube.delete(Pod, meta.name, namespace=namespace, grace_period=0)

    task = asyncio.create_task(confirm())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def leader(kube: AsyncClient, controllers: ChartControllers) -> Replica | None:
    lease = await kube.get(Lease, LEASE_NAME, namespace=NAMESPACE)
    holder = lease.spec.holderIdentity if lease.spec else None
    return controllers.replicas.get(str(holder)) if holder else None


async def test_the_production_guide_on_the_chart(
    walk_plane: ControlPlane, walk_kube: AsyncClient, tmp_path: Path
) -> None:
    plane, kube = walk_plane, walk_kube
    receiver = WebhookReceiver()
    await receiver.start()
    aliases = tmp_path / "hosts"
    aliases.write_text("")
    controllers = ChartControllers(plane, kube, tmp_path,
                                   extra_env={"HOST_ALIASES_FILE": str(aliases)})  # fmt: skip
    alertmanagers = ChartAlertmanagers(kube, tmp_path, aliases)
    try:
        await walk(plane, kube, tmp_path, controllers, alertmanagers, receiver)
    finally:
        controllers.stop_all()
        alertmanagers.stop()
        await receiver.stop()
    assert_no_credential_in_logs(tmp_path)


def assert_no_credential_in_logs(tmp_path: Path) -> None:
    """No token of the run (the controller's, the uninstall Job's, the agents') appears, whole
    or by its signature, in any log a process wrote (issue 23, scope 7)."""
    tokens = [p.read_text().strip() for p in tmp_path.rglob("agent-token")]
    for kubeconfig in tmp_path.rglob("*.kubeconfig"):
        config = yaml.safe_load(kubeconfig.read_text())
        tokens += [u["user"]["token"] for u in config["users"] if "token" in u["user"]]
    assert len(tokens) >= 3, "the agents', the controller's and the uninstall Job's tokens"
    secrets_seen = set(tokens) | {t.rsplit(".", 1)[-1] for t in tokens}
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert logs, "the run's logs"
    leaked = [str(p) for p in logs if any(s in p.read_text(errors="replace") for s in secrets_seen)]
    assert not leaked, f"a token in {leaked}"


def my_values(tmp_path: Path, receiver: WebhookReceiver, *extra: str,
              rules: bool = False) -> Path:  # fmt: skip
    """The walkthrough's my-values.yaml: the embedded store, the chart's Alertmanager routing
    to the test receiver, optionally the default rules plus an always-firing one, and the
    named snippets of examples/production."""
    values: dict[str, Any] = yaml.safe_load((SNIPPETS / "embedded-store.yaml").read_text())
    values["alert"] = {"alertManagerConfig": {
        "global": {}, "receivers": [{"name": "default-receiver", "webhook_configs": [
            {"url": receiver.url, "send_resolved": True}]}],
        "route": {"receiver": "default-receiver", "group_wait": "1s", "group_interval": "5s",
                  "repeat_interval": "3h"}}}  # fmt: skip
    for name in extra:
        snippet = yaml.safe_load((SNIPPETS / f"{name}.yaml").read_text())
        for key, value in snippet.items():
            merged = {**values.get(key, {}), **value} if isinstance(value, dict) else value
            values[key] = merged
    if rules:
        defaults = yaml.safe_load((CHART / "values.yaml").read_text())["dynamicConfig"]
        appended = yaml.safe_load((SNIPPETS / "alert-rule-appended.yaml").read_text())
        # the guide's rule, made to fire on the simulated GPUs at once
        appended[0].update(threshold=-1, consecutiveCount=1)
        values["dynamicConfig"] = {"alertRules": [*defaults["alertRules"], *appended]}
    path = tmp_path / "my-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


async def restart(controllers: ChartControllers, names: list[str]) -> None:
    """What a Deployment rollout does to the replicas when the pod template changed."""
    controllers.stop_all()
    for name in names:
        await controllers.start(name)


async def walk(
    plane: ControlPlane,
    kube: AsyncClient,
    tmp_path: Path,
    controllers: ChartControllers,
    alertmanagers: ChartAlertmanagers,
    receiver: WebhookReceiver,
) -> None:
    # -- step 1: the production overlay alone ------------------------------------------------
    await helm_install(plane, PRODUCTION)
    deployment = await kube.get(Deployment, f"{RELEASE}-controller", namespace=NAMESPACE)
    statefulset = await kube.get(StatefulSet, f"{RELEASE}-alert-manager", namespace=NAMESPACE)
    assert deployment.spec and statefulset.spec
    assert (deployment.spec.replicas, statefulset.spec.replicas) == (2, 3)
    assert [job async for job in kube.list(Job, namespace=NAMESPACE)] == [], "no Job pods"
    await restart(controllers, ["controller-a", "controller-b"])

    async def store_condition(wanted: str) -> bool:
        found = await kube.get(CLUSTER, "tensor-fusion")
        return condition(found, "TimeSeriesDatabaseReady").get("status") == wanted

    await eventually(lambda: store_condition("False"), timeout=120,
                     what="TimeSeriesDatabaseReady=False after the overlay alone",
                     components=controllers.components())  # fmt: skip

    # -- steps 2 and 3: the embedded store (no GreptimeDB here), the receivers ----------------
    await helm_install(plane, PRODUCTION, my_values(tmp_path, receiver))
    await restart(controllers, ["controller-c", "controller-d"])  # TSDB env changed
    await eventually(lambda: store_condition("True"), timeout=120,
                     what="TimeSeriesDatabaseReady=True on the embedded store",
                     components=controllers.components())  # fmt: skip
    active = await eventually(lambda: leader(kube, controllers), what="a leader",
                              components=controllers.components())  # fmt: skip
    standby = next(r for r in controllers.replicas.values() if r is not active)
    addresses = await alertmanagers.start()

    # -- GPU nodes with their agents (metrics through the standby, forwarded to the leader) ---
    write_url = standby.peer_url()
    nodes, runner = await simulated_gpu_nodes(plane, kube, tmp_path, write_url)
    async with runner.running(), confirming_deletions(kube, "default"):

        def watched() -> list[Component]:
            return [*controllers.components(), *runner.components()]

        async def all_running() -> bool:
            cluster = (await kube.get(CLUSTER, "tensor-fusion")).to_dict()
            pool = (await kube.get(POOL, "tensor-fusion-shared")).to_dict()
            phases = [cluster.get("status", {}).get("phase"),
                      pool.get("status", {}).get("phase")]  # fmt: skip
            for name in nodes:
                try:
                    gpu_node = (await kube.get(GPU_NODE, name)).to_dict()
                except ApiError as error:
                    if error.status.code == 404:  # the controller has not made it yet
                        return False
                    raise
                phases.append(gpu_node.get("status", {}).get("phase"))
            gpus = [g.to_dict() async for g in kube.list(GPU)]
            phases += [g.get("status", {}).get("phase") for g in gpus]
            return len(gpus) == 4 and set(phases) == {"Running"}

        # -- verify: the cluster, its pool, GPU nodes and GPUs Running ------------------------
        await eventually(all_running, what="cluster, pool, GPU nodes and GPUs Running",
                         timeout=180, components=watched())  # fmt: skip
        shown = await plane.kubectl("get", "tensorfusioncluster,gpupool")
        assert "tensor-fusion-shared" in shown and "Running" in shown
        shown = await plane.kubectl("get", "gpunode,gpu")
        assert all(name in shown for name in nodes)

        # -- step 6: simulate a scheduling decision, dump the allocator ----------------------
        code, body = await http("POST", active.url("/api/simulate-schedule"), SIMULATE_BODY,
                                content_type="application/yaml")  # fmt: skip
        assert code == 200, body
        assert any(name in body for name in nodes), body
        code, body = await http("GET", active.url("/api/allocation"))
        assert code == 200 and json.loads(body)

        # -- step 3: a rule appended with helm upgrade fires without a restart -----------------
        template = (await controllers.deployment())["spec"]["template"]
        await helm_install(plane, PRODUCTION, my_values(tmp_path, receiver, rules=True))
        assert (await controllers.deployment())["spec"]["template"] == template, (
            "a rule change must not roll the controller")  # fmt: skip
        await controllers.sync_config_maps()  # the kubelet swaps the mounted directory

        async def firing_everywhere() -> bool:
            for address in addresses:
                names = [a["labels"].get("alertname") for a in await alertmanagers.alerts(address)]
                if "GPUTemperatureWarning" not in names:
                    return False
            notified = [a["labels"].get("alertname") for a in receiver.alerts("firing")]
            return "GPUTemperatureWarning" in notified

        try:
            await eventually(firing_everywhere, what="the appended rule firing in each of the "
                             "three Alertmanagers and at the receiver", timeout=150,
                             components=watched())  # fmt: skip
        except AssertionError as error:
            _, state = await http("GET", active.url("/api/alerts"))
            rule = [r for r in json.loads(state).get("rules", [])
                    if r["name"] == "GPUTemperatureWarning"]  # fmt: skip
            raise AssertionError(f"{error}\nthe rule on the leader: {rule}") from None
        starts = {a["startsAt"] for a in await alertmanagers.alerts(addresses[0])
                  if a["labels"].get("alertname") == "GPUTemperatureWarning"}  # fmt: skip

        # -- step 5: 3 of 10 replicas on TensorFusion, then the rollback ---------------------
        await point_webhook_at(kube, standby, controllers.components())
        await kube.create(Deployment.from_dict(guide_deployment("3", "true")))  # type: ignore[no-untyped-call]

        async def guide_pods() -> list[Pod]:
            return [p async for p in kube.list(Pod, namespace="default",
                                               labels={"app": "guide"})]  # fmt: skip

        async def three_on_tensor_fusion() -> bool:
            pods = await guide_pods()
            ours = [p for p in pods if p.spec and p.spec.schedulerName == SCHEDULER]
            bound = [p for p in ours if p.spec and p.spec.nodeName in nodes]
            return len(pods) == 10 and len(ours) == 3 and len(bound) == 3

        await eventually(three_on_tensor_fusion, what="3 of 10 replicas admitted and bound by "
                         "tensor-fusion-scheduler", timeout=120, components=watched())  # fmt: skip
        await kube.patch(Deployment, "guide", guide_deployment("0", "false"), namespace="default")

        async def rolled_back() -> bool:
            pods = [p for p in await guide_pods()
                    if p.metadata and not p.metadata.deletionTimestamp]  # fmt: skip
            native = [p for p in pods if p.spec and p.spec.schedulerName != SCHEDULER]
            return len(pods) == 10 and len(native) == 10

        await eventually(rolled_back, what="all 10 replicas back on nvidia.com/gpu",
                         timeout=120, components=watched())  # fmt: skip
        await kube.delete(Deployment, "guide", namespace="default")

        # -- verify: the active controller killed while pods are created ---------------------
        active.component.kill()
        for index in range(2):
            await kube.create(Pod.from_dict(tf_pod(f"after-kill-{index}")))  # type: ignore[no-untyped-call]

        async def bound_again() -> bool:
            pods = [await kube.get(Pod, f"after-kill-{i}", namespace="default") for i in range(2)]
            return all(p.spec and p.spec.nodeName in nodes for p in pods)

        await eventually(bound_again, what="pods admitted by the standby and bound after the "
                         "failover", timeout=90, components=[standby.component])  # fmt: skip
        controllers.replicas.pop(active.pod)
        active = standby

        # The new leader restores the firing alerts from the state ConfigMap. Its embedded store
        # starts empty (GreptimeDB keeps the history), so the alert may resolve until new rows
        # come: what it sends then still carries the original start, never a new alert.
        async def state_restored() -> bool:
            return "restored" in active.component.log_path.read_text()

        await eventually(state_restored, what="the new leader restoring the alert state",
                         timeout=60, components=[active.component])  # fmt: skip
        resolved = [a["startsAt"] for a in receiver.alerts("resolved")
                    if a["labels"].get("alertname") == "GPUTemperatureWarning"]  # fmt: skip
        assert set(resolved) <= starts, "a resolution carries the start of the alert it ends"

        # -- verify: the controller logs -----------------------------------------------------
        log = active.component.log_path.read_text()
        assert "metrics store" in log, "the store line"
        assert "kube-scheduler" in log, "the child kube-scheduler's output"
        errors = [line for line in log.splitlines() if " ERROR " in line]
        assert not errors, errors[:5]

        # -- step 3, option B: your Alertmanager through -alert-manager-addr -------------------
        option_b = my_values(tmp_path, receiver, "external-alertmanager", rules=True)
        text = option_b.read_text().replace(
            "http://<alertmanager-service>.<namespace>.svc.cluster.local:9093",
            f"http://{addresses[0]}:9093")  # fmt: skip
        option_b.write_text(text)
        await restore_webhook_service(kube)  # helm would otherwise merge url and service
        await helm_install(plane, PRODUCTION, option_b)
        assert not [s async for s in kube.list(StatefulSet, namespace=NAMESPACE)]
        await restart(controllers, ["controller-e", "controller-f"])  # the command changed
        before = len(receiver.notifications)

        async def delivered_to_option_b() -> bool:
            for replica in controllers.replicas.values():
                try:
                    code, body = await http("GET", replica.url("/api/alerts"))
                except aiohttp.ClientError:
                    continue  # not listening yet
                if code == 200 and addresses[0] in body:
                    return True
            return False

        await eventually(delivered_to_option_b, what="the leader delivering to -alert-manager-"
                         "addr", timeout=90, components=controllers.components())  # fmt: skip
        assert len(receiver.notifications) >= before

        # -- step 5: progressive migration switched on with helm upgrade ---------------------
        migration = my_values(tmp_path, receiver, "progressive-migration", rules=True)
        await helm_install(plane, PRODUCTION, migration)
        [hook] = (await kube.get(MutatingWebhookConfiguration,
                                 f"{RELEASE}-mutating-webhook")).webhooks or []  # fmt: skip
        selector = hook.objectSelector  # defaulted to {} by the API server: every pod
        assert selector is None or not (selector.matchLabels or selector.matchExpressions)
        assert hook.namespaceSelector is not None and hook.namespaceSelector.matchExpressions
        await restart(controllers, ["controller-g", "controller-h"])  # env changed

        async def agents_migrating() -> bool:
            agents: dict[str, Any] = {"tensor-fusion.ai/component": "hypervisor"}
            pods = [p async for p in kube.list(Pod, namespace=NAMESPACE, labels=agents)]
            envs = [{e.name: e.value for e in (p.spec.containers[0].env or [])}
                    for p in pods if p.spec]  # fmt: skip
            return len(envs) == 2 and all(e.get("DETECT_IN_USED_GPUS") == "true" for e in envs)

        # agents are replaced here: only the controllers are watched for an early exit
        await eventually(agents_migrating, what="the agents rolled out with DETECT_IN_USED_GPUS",
                         timeout=120, components=controllers.components())  # fmt: skip

        # -- uninstall: the hook's command leaves no finalizer --------------------------------
        # every pod creation reaches the webhook now: the replicas serve it
        await point_webhook_at(kube, next(iter(controllers.replicas.values())),
                               controllers.components())  # fmt: skip
        finalizer = "tensor-fusion.ai/finalizer"
        spec = PodSpec(containers=[Container(name="c", image="x:1")])
        meta = ObjectMeta(name="held", namespace="default", finalizers=[finalizer])
        await kube.create(Pod(metadata=meta, spec=spec))
    controllers.stop_all()
    # The pre-delete hooks as helm keeps them: the Job's own ServiceAccount and role are
    # applied as helm would before the Job; no kubelet runs the Job here, so its command runs
    # as a process with a token of that ServiceAccount.
    hooks = [o for o in yaml.safe_load_all(await plane.helm("get", "hooks", RELEASE, "-n",
                                                             NAMESPACE)) if o]  # fmt: skip
    [job] = [o for o in hooks if o.get("kind") == "Job"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["tensor-fusion", "uninstall"]
    accounts = tmp_path / "uninstall-rbac.yaml"
    accounts.write_text(yaml.safe_dump_all([o for o in hooks if o.get("kind") != "Job"]))
    await plane.kubectl("apply", "--server-side", "-f", str(accounts))
    kubeconfig = await controllers.account_kubeconfig(
        job["spec"]["template"]["spec"]["serviceAccountName"]
    )
    process = await asyncio.create_subprocess_exec(
        str(EXECUTABLE), *command[1:], "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    leftovers = [p.metadata.name async for p in kube.list(Pod, namespace="*")
                 if p.metadata and finalizer in (p.metadata.finalizers or [])]  # fmt: skip
    assert leftovers == []
    await plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks")
