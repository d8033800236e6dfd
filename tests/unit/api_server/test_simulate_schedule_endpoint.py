"""`POST /api/simulate-schedule` (scheduling.md §16.1) on a leader with the examples' cluster:
the guide's pod as sent gives the spec's success body; every error code."""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from tensorfusion.api_server import SIMULATE_SCHEDULE_PATH

from .fakes import DATA, FakeBackend, spec_inputs

Client = TestClient[web.Request, web.Application]

GUIDE_POD = (DATA / "guide_test_pod.yaml").read_bytes()
TRAINER_POD = (DATA / "trainer_pod.yaml").read_bytes()
SUCCESS = json.loads((DATA / "spec_16_1_success.json").read_text(encoding="utf-8"))
UNSCHEDULABLE = json.loads((DATA / "spec_16_1_unschedulable.json").read_text(encoding="utf-8"))
YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
def ready(backend: FakeBackend) -> FakeBackend:
    backend.inputs, virtual = spec_inputs()
    backend.live_allocator = virtual.allocator
    return backend


def guide_pod() -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load(GUIDE_POD)
    return pod


async def error_of(response: Any, status: int, code: str) -> str:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert message
    return message


async def test_the_guide_pod_as_yaml_gives_the_spec_success_body(
    client: Client, ready: FakeBackend
) -> None:
    assert ready.inputs is not None
    records = dict(ready.inputs.allocator.records)
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    assert response.status == 200
    assert response.content_type == "application/json"
    assert await response.json() == SUCCESS
    # Nothing changes: no assumption, no index advance, the pod is gone from the native view.
    assert ready.inputs.allocator.records == records
    assert ready.inputs.preparer().index.peek() == 1
    assert ready.inputs.native.pods == {}


@pytest.mark.parametrize(
    ("data", "headers"),
    [
        (orjson.dumps(yaml.safe_load(GUIDE_POD)), {"Content-Type": "application/json"}),
        (orjson.dumps(yaml.safe_load(GUIDE_POD)), {}),  # no type: JSON first
        (GUIDE_POD, {}),  # no type: JSON fails, then YAML
        (GUIDE_POD, {"Content-Type": "application/x-www-form-urlencoded"}),  # curl -d
        (GUIDE_POD, {"Content-Type": "text/yaml; charset=utf-8"}),
    ],
    ids=["json", "json-untyped", "yaml-untyped", "yaml-as-form", "text-yaml"],
)
async def test_json_and_yaml_bodies_are_read_by_content_type_or_json_then_yaml(
    client: Client, ready: FakeBackend, data: bytes, headers: dict[str, str]
) -> None:
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=data, headers=headers)
    assert response.status == 200, await response.text()
    assert await response.json() == SUCCESS


async def test_an_unschedulable_pod_is_a_200_with_the_stage_per_node(
    client: Client, ready: FakeBackend
) -> None:
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"nodes": "node-a,node-b,node-d"},
        data=TRAINER_POD, headers=YAML,
    )  # fmt: skip
    assert response.status == 200
    assert await response.json() == UNSCHEDULABLE


async def test_the_nodes_query_restricts_the_candidates(client: Client, ready: FakeBackend) -> None:
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"nodes": " node-d , "}, data=GUIDE_POD, headers=YAML
    )
    body = await response.json()
    assert [n["node"] for n in body["nodes"]] == ["node-d"]
    assert body["result"]["node"] == "node-d"


async def test_mutate_false_reads_the_pod_as_is(client: Client, ready: FakeBackend) -> None:
    pod = guide_pod()
    pod["metadata"]["annotations"]["tensor-fusion.ai/gpupool"] = "tensor-fusion-shared"
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"mutate": "false"}, data=orjson.dumps(pod)
    )
    body = await response.json()
    assert body["mutated"] is False
    assert body["request"]["qos"] == "medium"  # no admission, no QoS derivation
    assert body["result"]["gpus"] == ["gpu-a2"]
    mutated = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"mutate": "TRUE"}, data=orjson.dumps(pod)
    )
    assert (await mutated.json())["mutated"] is True


@pytest.mark.parametrize(
    ("data", "headers", "expected"),
    [
        (b"", {}, "empty body"),
        (b"  \n", YAML, "empty body"),
        (b"- a\n- b\n", YAML, "a mapping), got list"),
        (b"just words", {}, "got str"),
        (b'{"kind": "Pod",', {"Content-Type": "application/json"}, "not valid JSON"),
        (b"metadata: {name: [unclosed\n", {}, "neither valid JSON nor valid YAML"),
        (b"kind: Pod\nmetadata: {name: \xff}\n", YAML, "not UTF-8"),
        (b"a: 1\n---\nb: 2\n", YAML, "neither valid JSON nor valid YAML"),
        (b"kind: Service\nspec: {containers: [{name: c}]}\n", YAML, "kind must be Pod"),
        (b"kind: Pod\nmetadata: {name: p}\nspec: {}\n", YAML, "at least one container"),
        (
            b"kind: Pod\nmetadata: {labels: {tensor-fusion.ai/enabled: true}}\n"
            b"spec: {containers: [{name: c}]}\n",
            YAML, 'quote values like "true"',
        ),
    ],
    ids=[
        "empty", "blank", "list", "scalar", "bad-json", "bad-yaml", "not-utf8",
        "two-documents", "not-a-pod", "no-container", "unquoted-label",
    ],
)  # fmt: skip
async def test_invalid_bodies_are_400_invalid_body(
    client: Client, ready: FakeBackend, data: bytes, headers: dict[str, str], expected: str
) -> None:
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=data, headers=headers)
    assert expected in await error_of(response, 400, "InvalidBody")


async def test_a_body_over_1_mib_is_invalid(client: Client, ready: FakeBackend) -> None:
    padding = b"# " + b"x" * (1024 * 1024) + b"\n"
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, data=io.BytesIO(GUIDE_POD + padding), headers=YAML
    )
    assert "larger than 1048576 bytes" in await error_of(response, 400, "InvalidBody")

    async def chunks() -> Any:  # no Content-Length: the limit holds while reading
        yield GUIDE_POD
        yield padding

    streamed = await client.post(SIMULATE_SCHEDULE_PATH, data=chunks(), headers=YAML)
    assert "larger than" in await error_of(streamed, 400, "InvalidBody")
    just_fits = GUIDE_POD + b"#" * (1024 * 1024 - len(GUIDE_POD))
    fits = await client.post(SIMULATE_SCHEDULE_PATH, data=io.BytesIO(just_fits), headers=YAML)
    assert fits.status == 200


async def test_a_pod_without_the_labels_is_not_a_gpu_worker(
    client: Client, ready: FakeBackend
) -> None:
    pod = guide_pod()
    del pod["metadata"]["labels"]
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=orjson.dumps(pod))
    message = await error_of(response, 400, "NotAGPUWorker")
    assert 'tensor-fusion.ai/enabled: "true"' in message
    pod["metadata"]["labels"] = {"tensor-fusion.ai/enabled": "false"}
    again = await client.post(SIMULATE_SCHEDULE_PATH, data=orjson.dumps(pod))
    await error_of(again, 400, "NotAGPUWorker")


async def test_invalid_annotations_are_422_with_the_admission_message(
    client: Client, ready: FakeBackend
) -> None:
    pod = guide_pod()
    pod["metadata"]["annotations"]["tensor-fusion.ai/tflops-request"] = "lots"
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=orjson.dumps(pod))
    message = await error_of(response, 422, "InvalidAnnotations")
    assert "tensor-fusion.ai/tflops-request" in message
    assert "lots" in message


async def test_unknown_nodes_are_400_naming_them(client: Client, ready: FakeBackend) -> None:
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"nodes": "node-a,node-z,node-y"},
        data=GUIDE_POD, headers=YAML,
    )  # fmt: skip
    message = await error_of(response, 400, "UnknownNodes")
    assert "node-z, node-y" in message


async def test_an_invalid_mutate_value_is_400(client: Client, ready: FakeBackend) -> None:
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, params={"mutate": "no"}, data=GUIDE_POD, headers=YAML
    )
    assert "mutate" in await error_of(response, 400, "InvalidQuery")


async def test_before_recovery_it_is_503_allocator_not_ready(
    client: Client, backend: FakeBackend
) -> None:
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    await error_of(response, 503, "AllocatorNotReady")
    assert response.headers["Retry-After"] == "5"


async def test_other_methods_and_unknown_paths_get_the_error_body(
    client: Client, ready: FakeBackend
) -> None:
    response = await client.get(SIMULATE_SCHEDULE_PATH)
    await error_of(response, 405, "MethodNotAllowed")
    assert response.headers["Allow"] == "POST"
    await error_of(await client.get("/api/no-such-thing"), 404, "NotFound")


async def test_an_unexpected_failure_is_500_with_the_error_body(
    client: Client, backend: FakeBackend
) -> None:
    backend.inputs_error = RuntimeError("cache exploded")
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    assert "cache exploded" in await error_of(response, 500, "InternalError")
