"""`tensor-fusion doctor`'s live checks against the chart as the walkthrough installs it.

The chart is installed with the production overlay and `examples/production/embedded-store.yaml`
into a control plane of its own; two controllers run from the Deployment as its ServiceAccount
(`ChartControllers`), three real Alertmanagers from the StatefulSet (`ChartAlertmanagers`),
simulated agents on two GPU nodes (`AgentRunner`). There is no kubelet, so the test plays it for
the pods the doctor reads: the ReplicaSet's two controller pods are bound to two nodes, their
replicas started under their names (the Lease holder is a pod name) and marked Running, and
Ready once the replica's `/readyz` answers; the StatefulSet's three pods are the stand-ins
`ChartAlertmanagers` makes (no StatefulSet controller runs here), Running and Ready at their
Alertmanager's address.

The API server refuses to proxy to loopback addresses, where the replicas listen, so the
controller pods get this machine's non-loopback address, and `LeaderRelay` listens there on
port 8080 and hands each connection to the replica holding the Lease: the service proxy (an
EndpointSlice for Service `tensor-fusion-sys`, as the endpoint controller would write it) and
the pod proxy reach the controller API as they would reach a pod.

Then: every live check PASS (the Python API with the merged values, and the CLI once with
`--kubeconfig`); `--send-test-alert` reaches each of the three Alertmanagers; the leader killed,
`live.leader` names the survivor once the Lease moved; the controllers stopped (so none restores
it) and the caBundle replaced by another CA's certificate, `live.webhook` FAILs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from tensorfusion.adapters.kube.client import raw_http
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.tls.webhook_certificates import issue
from tensorfusion.doctor.live_checks import run_live_checks
from tensorfusion.doctor.live_context import LiveContext
from tensorfusion.doctor.live_controller_api import TEST_ALERT_NAME
from tensorfusion.doctor.live_pods import check_leader
from tensorfusion.doctor.report import format_text
from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.values_merge import load_values, merge_layers
from tensorfusion.runtime.leader_election import LEASE_NAME

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
from .controlplane import Component, ControlPlane, component_environment, eventually
from .nodes import node_status

pytestmark = pytest.mark.cluster

LIVE_IDS = {"live.leader", "live.webhook", "live.simulate", "live.controller-pods",
            "live.alertmanager-pods", "live.crds", "live.cluster-pools", "live.gpus",
            "live.metrics-store"}  # fmt: skip
CONTROLLER_NODES = ("control-a", "control-b")
MY_VALUES = SNIPPETS / "embedded-store.yaml"
API_PORT = 8080
CLUSTER: Any = resource_of("TensorFusionCluster")
POOL: Any = resource_of("GPUPool")
GPU_NODE: Any = resource_of("GPUNode")
GPU: Any = resource_of("GPU")


@pytest.fixture(scope="module")
def doctor_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("doctor")) as plane:
        yield plane


@pytest.fixture
async def doctor_kube(doctor_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    async with admin_client(doctor_plane, "doctor") as client:
        yield client


def host_address() -> str:
    """This machine's address on its default route (the API server proxies to no loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # no packet is sent
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or ipaddress.ip_address(address).is_loopback:
        pytest.fail("the API server refuses to proxy to loopback addresses: this test needs a "
                    "non-loopback IPv4 address on a default route")  # fmt: skip
    return address


def merged_values() -> dict[str, Any]:
    """The values helm installed: chart defaults, the overlay, then my-values."""
    chart = load_values((CHART / "values.yaml").read_text(), "values.yaml")
    files = [(str(p), load_values(p.read_text(), str(p))) for p in (PRODUCTION, MY_VALUES)]
    return merge_layers(chart, files, []).values


# ---- the network and the kubelet, played ----------------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


class LeaderRelay:
    """`address:8080` relayed to the API port of the replica that holds the Lease."""

    def __init__(self, kube: AsyncClient, controllers: ChartControllers) -> None:
        self.kube, self.controllers = kube, controllers
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self, address: str) -> None:
        self._server = await asyncio.start_server(self._handle, address, API_PORT)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        try:
            lease = await self.kube.get(Lease, LEASE_NAME, namespace=NAMESPACE)
            holder = lease.spec.holderIdentity if lease.spec else None
            replica = self.controllers.replicas.get(str(holder))
            if replica is None:
                raise OSError(f"no replica holds the Lease ({holder})")
            upstream = await asyncio.open_connection(replica.ip, replica.api_port)
        except (OSError, ApiError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))

    async def close(self) -> None:
        """Stop listening and drop the connections the API server keeps open."""
        for task in list(self._handlers):
            task.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)


async def create_plain_node(kube: AsyncClient, name: str) -> None:
    """A Ready node without GPUs, for the controller pods."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    await kube.create(Node(metadata=ObjectMeta(name=name, labels=labels)))
    status = node_status({"cpu": "16", "memory": "64Gi", "pods": "110"}, hostname=name)
    await kube.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def mark_pod(kube: AsyncClient, name: str, address: str, *, ready: bool) -> None:
    status: dict[str, Any] = {"phase": "Running", "startTime": _now(), "podIP": address,
                              "podIPs": [{"ip": address}], "hostIP": address,
                              "conditions": [{"type": "Ready", "status": str(ready),
                                              "lastTransitionTime": _now()}]}  # fmt: skip
    await kube.patch(Pod.Status, name, {"status": status}, namespace=NAMESPACE,
                     patch_type=PatchType.MERGE)  # fmt: skip


async def readyz(replica: Replica) -> bool:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with (
            aiohttp.ClientSession() as session,
            session.get(replica.url("/readyz", health=True), timeout=aiohttp.ClientTimeout(2))
            as reply,
        ):  # fmt: skip
            return reply.status == 200
    return False


async def run_controller_pods(
    kube: AsyncClient, controllers: ChartControllers, address: str
) -> list[Replica]:
    """The ReplicaSet's two pods: bound to a node each, their replicas started under their
    names, Running, Ready once `/readyz` answers; Service `tensor-fusion-sys`'s EndpointSlice."""

    async def two_pods() -> list[str] | None:
        pods = [p.metadata.name async for p in kube.list(
            Pod, namespace=NAMESPACE, labels={"tensor-fusion.ai/component": "operator"})
            if p.metadata and p.metadata.name]  # fmt: skip
        return sorted(pods) if len(pods) == 2 else None

    names = await eventually(two_pods, what="the ReplicaSet's two controller pods", timeout=60)
    http = raw_http(kube)
    replicas = []
    for name, node in zip(names, CONTROLLER_NODES, strict=True):
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
        response = await http.post(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/binding",
                                   json=binding)  # fmt: skip
        assert response.status_code == 201, response.text
        replicas.append(await controllers.start(name))
        await mark_pod(kube, name, address, ready=False)
    for replica in replicas:
        await eventually(functools.partial(readyz, replica), what=f"{replica.pod} /readyz",
                         timeout=120, components=controllers.components())  # fmt: skip
        await mark_pod(kube, replica.pod, address, ready=True)
    for index, (name, node) in enumerate(zip(names, CONTROLLER_NODES, strict=True)):
        endpoint = {
            "addresses": [address],
            "conditions": {"ready": True},
            "nodeName": node,
            "targetRef": {"kind": "Pod", "name": name, "namespace": NAMESPACE},
        }
        slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": f"{RELEASE}-played-{index}", "namespace": NAMESPACE,
                               "labels": {"kubernetes.io/service-name": RELEASE}},
                  "addressType": "IPv4", "endpoints": [endpoint],
                  "ports": [{"name": "http", "port": API_PORT, "protocol": "TCP"}]}  # fmt: skip
        response = await http.post(
            f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices", json=slice_
        )
        assert response.status_code == 201, response.text
    return replicas


async def gpus_running(kube: AsyncClient) -> bool:
    """The cluster, the pool, 2 GPU nodes, 4 GPUs Running and the store connected."""
    cluster = (await kube.get(CLUSTER, "tensor-fusion")).to_dict()
    pool = (await kube.get(POOL, "tensor-fusion-shared")).to_dict()
    nodes = [n.to_dict() async for n in kube.list(GPU_NODE)]
    gpus = [g.to_dict() async for g in kube.list(GPU)]
    phases = {o.get("status", {}).get("phase") for o in [cluster, pool, *nodes, *gpus]}
    store = [c for c in cluster.get("status", {}).get("conditions") or ()
             if c["type"] == "TimeSeriesDatabaseReady" and c["status"] == "True"]  # fmt: skip
    return len(nodes) == 2 and len(gpus) == 4 and phases == {"Running"} and bool(store)


async def until_all_pass(
    kube: AsyncClient, values: dict[str, Any], components: list[Component]
) -> list[CheckResult]:
    """The live checks, run until every one passes (the last report in the failure)."""
    last: list[CheckResult] = []

    async def attempt() -> list[CheckResult] | None:
        nonlocal last
        last = await run_live_checks(kube, values=values)
        return last if all(r.status is Status.PASS for r in last) else None

    try:
        return await eventually(attempt, what="every live check PASS", timeout=120,
                                interval=3.0, components=components)  # fmt: skip
    except AssertionError as error:
        raise AssertionError(f"{error}\n{format_text(last).plain}") from None


async def doctor_cli(kubeconfig: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        str(EXECUTABLE), "doctor", "--kubeconfig", str(kubeconfig), "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=component_environment(),
    )  # fmt: skip
    output, errors = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, output.decode() + errors.decode()


# ---- the test ------------------------------------------------------------------------------


async def test_the_doctor_on_the_walkthrough_cluster(
    doctor_plane: ControlPlane, doctor_kube: AsyncClient, tmp_path: Path
) -> None:
    plane, kube = doctor_plane, doctor_kube
    address = host_address()
    aliases = tmp_path / "hosts"
    aliases.write_text("")
    controllers = ChartControllers(plane, kube, tmp_path,
                                   extra_env={"HOST_ALIASES_FILE": str(aliases)})  # fmt: skip
    alertmanagers = ChartAlertmanagers(kube, tmp_path, aliases)
    relay = LeaderRelay(kube, controllers)
    try:
        await helm_install(plane, PRODUCTION, MY_VALUES)
        for node in CONTROLLER_NODES:
            await create_plain_node(kube, node)
        await relay.start(address)
        # before the controllers: discovered at once; their pods as the StatefulSet's
        await alertmanagers.start()
        replicas = await run_controller_pods(kube, controllers, address)
        await diagnose(plane, kube, tmp_path, controllers, alertmanagers, replicas)
    finally:
        controllers.stop_all()
        alertmanagers.stop()
        await relay.close()


async def diagnose(
    plane: ControlPlane,
    kube: AsyncClient,
    tmp_path: Path,
    controllers: ChartControllers,
    alertmanagers: ChartAlertmanagers,
    replicas: list[Replica],
) -> None:
    write_url = replicas[0].peer_url()
    nodes, runner = await simulated_gpu_nodes(plane, kube, tmp_path, write_url)
    values = merged_values()
    async with runner.running():

        def watched() -> list[Component]:
            return [*controllers.components(), *runner.components()]

        await eventually(lambda: gpus_running(kube), what="cluster, pool, GPU nodes, GPUs "
                         "Running and the store connected", timeout=180,
                         components=watched())  # fmt: skip

        # -- every live check passes: the Python API, then the command line ----------------
        results = await until_all_pass(kube, values, watched())
        print(format_text(results).plain)  # the report, shown with -s
        assert {r.id for r in results} == LIVE_IDS
        by_id = {r.id: r for r in results}
        assert "as the values say" in by_id["live.webhook"].found
        assert any(node in by_id["live.simulate"].found for node in nodes)
        assert all(r.command.startswith("kubectl ") for r in results)
        code, output = await doctor_cli(plane.kubeconfig)
        assert code == 0, output
        shown = json.loads(output)
        assert {item["id"] for item in shown} == LIVE_IDS
        assert {item["status"] for item in shown} == {"PASS"}, output

        # -- --api-url: the API reached directly, as after the guide's port-forward ---------
        # To the Lease holder: a follower would forward to the leader's Pod IP, which these
        # played pods do not listen on.
        lease = await kube.get(Lease, LEASE_NAME, namespace=NAMESPACE)
        assert lease.spec is not None
        holder = controllers.replicas[str(lease.spec.holderIdentity)]
        answers = await run_live_checks(kube, values=values, api_url=holder.url(""))
        direct = {r.id: r for r in answers}
        assert direct["live.simulate"].status is Status.PASS, direct["live.simulate"]
        assert direct["live.simulate"].command.startswith(f"curl -X POST {holder.url('')}")
        answers = await run_live_checks(kube, values=values, api_url="http://127.0.0.1:1")
        refused = {r.id: r for r in answers}
        assert refused["live.simulate"].status is Status.FAIL
        assert "kubectl port-forward deployment/" in refused["live.simulate"].fix

        # -- --send-test-alert: each of the three Alertmanagers holds the alert ------------
        [sent] = [r for r in await run_live_checks(kube, values=values, send_test_alert=True)
                  if r.id == "live.test-alert"]  # fmt: skip
        print(format_text([sent]).plain)
        assert sent.status is Status.PASS, sent
        assert f"accepted by {len(alertmanagers.addresses)} of {len(alertmanagers.addresses)}" in (
            sent.found
        )
        for am in alertmanagers.addresses:
            held = [a for a in await alertmanagers.alerts(am)
                    if a["labels"].get("alertname") == TEST_ALERT_NAME]  # fmt: skip
            assert held, f"{TEST_ALERT_NAME} not in the Alertmanager on {am}"
            assert f"http://{am}:9093/api/v2/alerts" in sent.found

        # -- the leader killed: live.leader names the survivor once the Lease moved --------
        lease = await kube.get(Lease, LEASE_NAME, namespace=NAMESPACE)
        assert lease.spec is not None
        leader = controllers.replicas[str(lease.spec.holderIdentity)]
        survivor = next(r for r in controllers.replicas.values() if r is not leader)
        leader.component.kill()
        controllers.replicas.pop(leader.pod)

        async def survivor_leads() -> str | None:
            # until the Lease expires, the killed holder's last renewal still counts
            outcome = await check_leader(LiveContext(raw_http(kube)))
            moved = outcome.found.startswith(f"held by {survivor.pod},")
            return outcome.found if outcome.status is Status.PASS and moved else None

        found = await eventually(survivor_leads, what="live.leader PASS after the failover",
                                 timeout=60, interval=1.0,
                                 components=[survivor.component])  # fmt: skip
        assert "renewed" in found, found

    # -- the caBundle replaced by another CA's certificate: live.webhook FAIL ------------------
    controllers.stop_all()  # none may restore it
    other = issue("elsewhere", "other", datetime.datetime.now(datetime.UTC))
    assert other.ca_pem is not None
    name = f"{RELEASE}-mutating-webhook"
    configuration = await kube.get(MutatingWebhookConfiguration, name)
    wrong = base64.b64encode(other.ca_pem).decode()
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wrong}
             for i in range(len(configuration.webhooks or []))]  # fmt: skip
    await kube.patch(MutatingWebhookConfiguration, name, patch, patch_type=PatchType.JSON)
    [webhook] = [r for r in await run_live_checks(kube, values=values) if r.id == "live.webhook"]
    print(format_text([webhook]).plain)
    assert webhook.status is Status.FAIL, webhook
    assert "does not validate the serving certificate" in webhook.found, webhook
    assert "CN=elsewhere-ca" in webhook.found
    assert webhook.command == f"kubectl get mutatingwebhookconfiguration {name} -o yaml"
    yaml.safe_dump(webhook.to_json())  # the report stays serialisable
