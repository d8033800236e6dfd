"""The live checks through the controller's HTTP API (port 8080), reached through the API
server's proxies, or at `--api-url` (a `kubectl port-forward`: with the chart's default
`controller.apiBindAddress: 127.0.0.1` the proxies cannot reach the API in a real cluster).

- `live.simulate`: the guide's step-6 test pod posted to `/api/simulate-schedule` at
  `--api-url`, else through the proxy of Service `<release>` port 8080; any replica answers (a
  follower forwards to the leader).
- `live.test-alert` (`--send-test-alert` only, the one write): the leader's `GET /api/alerts`
  (through the pod proxy of the Lease holder, else the Service until the leader answers) names
  the Alertmanager URLs the controller sends to; a short-lived `TensorFusionDoctorTest` alert
  is posted to each, through the API server's pod proxy when the URL's host is a pod IP of the
  namespace (pod IPs are often unreachable from where doctor runs), else, or when that fails,
  directly.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from tensorfusion.adapters.http_client import HTTP_ERRORS, HttpClient, HttpResponse, http_client
from tensorfusion.doctor.live_context import (
    API_PORT,
    DIRECT_TIMEOUT_S,
    ApiCallError,
    CheckOutcome,
    LiveContext,
    dig,
    response_message,
)
from tensorfusion.domain.alerting.alerts import DEFAULT_JOB
from tensorfusion.domain.doctor.results import Status
from tensorfusion.runtime.leader_election import LEASE_NAME

__all__ = [
    "GUIDE_TEST_POD",
    "TEST_ALERT_NAME",
    "check_simulate",
    "check_test_alert",
    "simulate_command",
    "test_alert",
    "test_alert_command",
]

GUIDE_TEST_POD: Final = """apiVersion: v1
kind: Pod
metadata:
  name: test-pod
  namespace: default
  labels:
    tensor-fusion.ai/enabled: "true"
  annotations:
    tensor-fusion.ai/tflops-request: "100"
    tensor-fusion.ai/vram-request: "16Gi"
    tensor-fusion.ai/tflops-limit: "100"
    tensor-fusion.ai/vram-limit: "16Gi"
spec:
  schedulerName: tensor-fusion-scheduler
  containers:
  - name: test-container
    image: nvidia/cuda
"""
"""The body of the guide's step-6 `curl` (production-deployment.md)."""

TEST_ALERT_NAME: Final = "TensorFusionDoctorTest"
TEST_ALERT_LIFETIME: Final = datetime.timedelta(minutes=5)
_LEADER_TRIES: Final = 4
_NODES_SHOWN: Final = 5


def simulate_command(ctx: LiveContext) -> str:
    """The command making the same call (test-pod.yaml: the guide's pod)."""
    if ctx.api_url:
        return (f"curl -X POST {ctx.api_url.rstrip('/')}/api/simulate-schedule "
                "-H 'Content-Type: application/yaml' --data-binary @test-pod.yaml")  # fmt: skip
    return f"kubectl create --raw {ctx.service_proxy('/api/simulate-schedule')} -f test-pod.yaml"


def port_forward_fix(ctx: LiveContext) -> str:
    """How to reach the API on loopback: the guide's port-forward, then `--api-url`."""
    return (f"kubectl port-forward deployment/{ctx.deployment_name} {API_PORT}:{API_PORT} "
            f"-n {ctx.namespace}   # then run doctor again with --api-url "
            f"http://localhost:{API_PORT} (the API listens on loopback: "
            "controller.apiBindAddress)")  # fmt: skip


def test_alert_command(ctx: LiveContext) -> str:
    """The kubectl command listing the test alert in the chart's Alertmanager."""
    return (
        f"kubectl get --raw '/api/v1/namespaces/{ctx.namespace}/services/alert-manager:9093"
        f"/proxy/api/v2/alerts?filter=alertname%3D%22{TEST_ALERT_NAME}%22'"
    )


# ---- live.simulate -----------------------------------------------------------------------


def _rejections(nodes: Sequence[Mapping[str, Any]]) -> str:
    shown = [
        f"{n.get('node')}: {n.get('rejectedAt')} ({n.get('message') or 'no message'})"
        for n in nodes[:_NODES_SHOWN]
    ]
    more = len(nodes) - len(shown)
    return "; ".join(shown) + (f"; {more} more" if more > 0 else "")


async def check_simulate(ctx: LiveContext) -> CheckOutcome:
    """The guide's test pod through `/api/simulate-schedule`: the node chosen, or why not."""
    where = ctx.api_url or f"Service {ctx.namespace}/{ctx.release}"
    try:
        response = await ctx.controller_api(
            "POST", "/api/simulate-schedule", GUIDE_TEST_POD.encode(), "application/yaml"
        )
    except ApiCallError as error:
        if error.code:
            raise
        return CheckOutcome(Status.FAIL, f"POST /api/simulate-schedule at {where}: {error.message}",
                       "is the port-forward running? " + port_forward_fix(ctx))  # fmt: skip
    if response.status_code != 200:
        message = response_message(response)
        if "AllocatorNotReady" in message:
            fix = "the leader is rebuilding its allocator: run again in a few seconds"
        elif ctx.api_url:
            fix = port_forward_fix(ctx)
        else:
            fix = (
                f"{port_forward_fix(ctx)}; or kubectl get endpointslices -n {ctx.namespace} -l "
                f"kubernetes.io/service-name={ctx.release}   # a Ready controller pod behind "
                f"Service {ctx.release}, port {API_PORT}"
            )
        return CheckOutcome(
            Status.FAIL,
            f"POST /api/simulate-schedule through {where}: {response.status_code} {message}",
            fix,
        )
    body = response.json()
    result = body.get("result") or {}
    if result.get("schedulable"):
        gpus = ", ".join(str(gpu) for gpu in result.get("gpus") or ())
        return CheckOutcome(
            Status.PASS,
            f"the guide's test pod (100 TFLOPS, 16Gi) would go to node "
            f"{result.get('node')}, GPUs {gpus or 'none'}",
        )
    nodes = [n for n in body.get("nodes") or () if n.get("rejectedAt")]
    return CheckOutcome(
        Status.WARN,
        f"the guide's test pod (100 TFLOPS, 16Gi) fits nowhere: "
        f"{result.get('message') or 'unschedulable'}; {_rejections(nodes)}",
        "kubectl get gpunode,gpu   # free capacity; each rejectedAt stage is "
        "described in docs/scheduling.md",
    )


# ---- live.test-alert ----------------------------------------------------------------------


class LeaderUnreachableError(Exception):
    """No `GET /api/alerts` answer from the leader; the message says what each try got."""


async def _api_port(ctx: LiveContext) -> int:
    for container in dig(await ctx.deployment(), "spec", "template", "spec", "containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == "http" and port.get("containerPort"):
                return int(port["containerPort"])
    return API_PORT


def _leader_body(response: HttpResponse) -> dict[str, Any] | None:
    if response.status_code != 200:
        return None
    body = response.json()
    return body if isinstance(body, dict) and dig(body, "replica", "leader") else None


async def leader_alerts(ctx: LiveContext) -> dict[str, Any]:
    """The leader's `GET /api/alerts` (only the leader lists its Alertmanager targets)."""
    tried = []
    if ctx.api_url:
        try:
            response = await ctx.controller_api("GET", "/api/alerts")
        except ApiCallError as error:
            tried.append(f"--api-url: {error.message}")
        else:
            body = _leader_body(response)
            if body is not None:
                return body
            tried.append("--api-url: not the leader (port-forward to the Lease holder's pod)")
    lease = await ctx.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{ctx.namespace}/leases/{LEASE_NAME}"
    )
    holder = str(dig(lease, "spec", "holderIdentity") or "")
    if holder:
        try:
            response = await ctx.proxy(
                "GET", ctx.pod_proxy(holder, await _api_port(ctx), "/api/alerts")
            )
        except ApiCallError as error:  # pods/proxy refused: the Service may be allowed
            tried.append(f"pod {holder}: {error}")
        else:
            body = _leader_body(response)
            if body is not None:
                return body
            tried.append(f"pod {holder}: {response.status_code} {response_message(response)}")
    for _ in range(_LEADER_TRIES):
        response = await ctx.proxy("GET", ctx.service_proxy("/api/alerts"))
        body = _leader_body(response)
        if body is not None:
            return body
        answer = "a follower" if response.status_code == 200 else response_message(response)
        tried.append(f"Service {ctx.release}: {response.status_code} {answer}")
    raise LeaderUnreachableError("; ".join(dict.fromkeys(tried)))


def test_alert(now: datetime.datetime) -> list[dict[str, Any]]:
    """The `/api/v2/alerts` body: one alert that ends by itself after five minutes."""

    def stamp(at: datetime.datetime) -> str:
        return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    labels = {
        "alertname": TEST_ALERT_NAME,
        "severity": "P2",
        "job": DEFAULT_JOB,
        "instance": "tensor-fusion-doctor",
    }
    annotations = {
        "summary": "Test alert from tensor-fusion doctor --send-test-alert",
        "description": "Sent to check that TensorFusion alerts reach this channel; no action "
        "needed. It resolves by itself.",
    }
    return [
        {
            "labels": labels,
            "annotations": annotations,
            "startsAt": stamp(now),
            "endsAt": stamp(now + TEST_ALERT_LIFETIME),
        }
    ]


@dataclass(frozen=True, slots=True)
class Delivery:
    """The post to one Alertmanager: accepted or not, and how it went."""

    accepted: bool
    text: str


async def _pods_by_ip(ctx: LiveContext) -> dict[str, str]:
    pods = await ctx.items(f"/api/v1/namespaces/{ctx.namespace}/pods")
    return {
        str(dig(p, "status", "podIP")): str(dig(p, "metadata", "name"))
        for p in pods
        if dig(p, "status", "podIP")
    }


async def _post(
    ctx: LiveContext, direct: HttpClient, url: str, body: bytes, pods: Mapping[str, str]
) -> Delivery:
    parts = urlsplit(url)
    errors = []
    pod = pods.get(parts.hostname or "")
    if pod is not None:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        name = f"https:{pod}" if parts.scheme == "https" else pod
        try:
            response = await ctx.proxy(
                "POST", ctx.pod_proxy(name, port, parts.path), body, "application/json"
            )
        except ApiCallError as error:
            errors.append(f"through pod {pod}: {error}")
        else:
            if response.status_code == 200:
                return Delivery(True, f"{url} (pod {pod}, through the API server)")
            errors.append(f"through pod {pod}: {response.status_code} {response_message(response)}")
    try:
        response = await direct.post(
            url, content=body, headers={"Content-Type": "application/json"}
        )
    except HTTP_ERRORS as error:
        errors.append(f"direct: {type(error).__name__}: {error}")
    else:
        if response.status_code == 200:
            return Delivery(True, url)
        errors.append(f"direct: {response.status_code} {response.text.strip()[:200]}")
    return Delivery(False, f"{url}: {'; '.join(errors)}")


async def check_test_alert(ctx: LiveContext) -> CheckOutcome:
    """A short-lived `TensorFusionDoctorTest` posted to every Alertmanager of the leader."""
    try:
        status = await leader_alerts(ctx)
    except LeaderUnreachableError as error:
        return CheckOutcome(
            Status.FAIL,
            f"no answer from the leader's GET /api/alerts: {error}",
            f"kubectl get lease {LEASE_NAME} -n {ctx.namespace}   # a leader?",
        )
    if status.get("enabled") is False:
        return CheckOutcome(
            Status.FAIL,
            "the controller runs without -enable-alert",
            "keep -enable-alert in controller.command (the default command)",
        )
    urls = [str(t.get("url")) for t in status.get("alertmanagers") or () if t.get("url")]
    if not urls:
        return CheckOutcome(
            Status.FAIL,
            f"the leader ({dig(status, 'replica', 'pod')}) sends to no Alertmanager",
            "alert.enabled: true (option A), or -alert-manager-addr "
            "in controller.command (option B)",
        )
    body = orjson.dumps(test_alert(ctx.clock()))
    pods = await _pods_by_ip(ctx)
    direct = ctx.direct or http_client(DIRECT_TIMEOUT_S)
    try:
        deliveries = [await _post(ctx, direct, url, body, pods) for url in urls]
    finally:
        if direct is not ctx.direct:
            await direct.aclose()
    accepted = [d.text for d in deliveries if d.accepted]
    refused = [d.text for d in deliveries if not d.accepted]
    found = (
        f"{TEST_ALERT_NAME} accepted by {len(accepted)} of {len(urls)} Alertmanagers: "
        f"{'; '.join(accepted + refused)}"
    )
    if refused:
        return CheckOutcome(
            Status.FAIL,
            found,
            "check those Alertmanagers (kubectl get pods -n "
            f"{ctx.namespace} -o wide) and the leader's GET /api/alerts",
        )
    return CheckOutcome(
        Status.PASS,
        f"{found}; check that it reached your channel (it resolves in "
        f"{TEST_ALERT_LIFETIME.seconds // 60} minutes)",
    )
