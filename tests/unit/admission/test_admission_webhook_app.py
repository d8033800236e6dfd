"""`POST /mutate-v1-pod` with the real admission pipeline behind a fixed-facts admitter: HTTP 200
and the request uid on every decodable review, the base64 JSON patch that turns the pod into the
admitted one, denials with code/reason/message, 400 for an undecodable body, 503 (never 500) when
the admitter fails, and pods that are not being created let through."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from tensorfusion.admission.webhook_app import (
    MUTATE_PATH,
    TransientAdmissionError,
    WebhookMetrics,
    create_webhook_app,
)
from tensorfusion.domain.admission.decision import AdmissionDecision
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.admission.review import AdmissionRequest

from .admission_builders import apply_patch, make_facts, make_pod, resources_ok

Client = TestClient[web.Request, web.Application]


class PipelineAdmitter:
    """`admit` with the builders' facts; `failure` makes every call fail."""

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.requests: list[AdmissionRequest] = []

    async def admit(self, request: AdmissionRequest) -> AdmissionDecision:
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        return admit(request.object, make_facts(dry_run=request.dry_run))


@pytest.fixture
def admitter() -> PipelineAdmitter:
    return PipelineAdmitter()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def client(admitter: PipelineAdmitter, registry: CollectorRegistry) -> AsyncIterator[Client]:
    app = create_webhook_app(admitter, WebhookMetrics(registry))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def review(pod: dict[str, Any], *, operation: str = "CREATE", dry_run: bool = False,
           kind: str = "Pod") -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "name": pod["metadata"].get("name"),
            "operation": operation, "object": pod, "dryRun": dry_run,
        },
    }  # fmt: skip


async def answer(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    reply = await client.post(MUTATE_PATH, json=body)
    assert reply.status == 200, await reply.text()
    data: dict[str, Any] = await reply.json()
    assert data["apiVersion"] == "admission.k8s.io/v1" and data["kind"] == "AdmissionReview"
    response: dict[str, Any] = data["response"]
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    return response


async def test_a_gpu_pod_is_mutated_by_a_base64_json_patch(client: Client) -> None:
    pod = make_pod(resources_ok())
    response = await answer(client, review(pod))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    mutated = apply_patch(pod, patch)
    assert mutated["spec"]["schedulerName"] == "tensor-fusion-scheduler"
    assert mutated["metadata"]["labels"]["tensor-fusion.ai/component"] == "worker"
    assert "tensor-fusion.ai/finalizer" in mutated["metadata"]["finalizers"]


async def test_a_bad_annotation_is_denied_with_code_reason_and_message(client: Client) -> None:
    pod = make_pod(resources_ok(**{"vram-request": "3Gx"}))
    response = await answer(client, review(pod))
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 400 and response["status"]["reason"] == "BadRequest"
    assert response["status"]["message"] == (
        'tensor-fusion.ai/vram-request: invalid value "3Gx": not a quantity (example: 3Gi)'
    )


async def test_a_pod_not_asking_for_tensor_fusion_is_left_alone(client: Client) -> None:
    response = await answer(client, review(make_pod(enabled=None)))
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(("operation", "kind"), [("UPDATE", "Pod"), ("CREATE", "Binding")])
async def test_anything_but_a_pod_create_is_allowed_unchanged(
    client: Client, admitter: PipelineAdmitter, operation: str, kind: str
) -> None:
    response = await answer(client, review(make_pod(resources_ok()), operation=operation,
                                           kind=kind))  # fmt: skip
    assert response["allowed"] is True and "patch" not in response
    assert admitter.requests == []


async def test_the_dry_run_flag_reaches_the_admitter(
    client: Client, admitter: PipelineAdmitter
) -> None:
    response = await answer(client, review(make_pod(resources_ok()), dry_run=True))
    assert response["allowed"] is True
    assert admitter.requests[0].dry_run is True


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (TransientAdmissionError("pod index", "leader unreachable"),
         "pod index failed, retry: leader unreachable"),
        (RuntimeError("boom"), "admission failed, retry: RuntimeError: boom"),
    ],
    ids=["transient", "unexpected"],
)  # fmt: skip
async def test_a_failure_is_a_503_denial_never_a_500(
    client: Client, admitter: PipelineAdmitter, registry: CollectorRegistry,
    failure: Exception, message: str,
) -> None:  # fmt: skip
    admitter.failure = failure
    response = await answer(client, review(make_pod(resources_ok())))
    assert response["allowed"] is False
    assert response["status"] == {"code": 503, "reason": "ServiceUnavailable", "message": message}
    assert registry.get_sample_value("tf_webhook_admissions_total", {"outcome": "unavailable"}) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "not an AdmissionReview v1"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
         "request.uid"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
         b'{"uid": "u", "operation": "CREATE"}}', "request.object"),
    ],
    ids=["not-json", "v1beta1", "no-uid", "no-object"],
)  # fmt: skip
async def test_an_undecodable_body_is_http_400(client: Client, body: bytes, expected: str) -> None:
    reply = await client.post(MUTATE_PATH, data=body)
    assert reply.status == 400
    assert expected in await reply.text()
