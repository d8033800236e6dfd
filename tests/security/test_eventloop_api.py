"""Hostile bodies to `POST /api/simulate-schedule`: 400 `InvalidBody` naming the limit (never a
500 or a traceback), the work off the event loop, 429 with `Retry-After` beyond the bound, and
the 500 path logging one line."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.api_server import SIMULATE_SCHEDULE_PATH, api_app, create_api_app, pod_body
from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.domain import simulate_schedule
from tensorfusion.domain.admission.dry_run import PodPreparer

from ..unit.api_server.fakes import DATA, GENERATED_AT, FakeBackend, spec_inputs
from .eventloop_load import max_size_pod

Client = TestClient[web.Request, web.Application]

GUIDE_POD = (DATA / "guide_test_pod.yaml").read_bytes()
YAML = {"Content-Type": "application/yaml"}
JSON = {"Content-Type": "application/json"}
DEADLINE_S = 10.0


@pytest.fixture
def offload() -> BoundedOffload:
    return BoundedOffload(name="simulate-schedule", limit=1, retry_after_s=2)


@pytest.fixture
def ready() -> FakeBackend:
    backend = FakeBackend()
    backend.inputs, virtual = spec_inputs()
    backend.live_allocator = virtual.allocator
    return backend


@pytest.fixture
async def client(ready: FakeBackend, offload: BoundedOffload) -> AsyncIterator[Client]:
    app = create_api_app(ready, clock=lambda: GENERATED_AT, offload=offload)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client
    offload.close()


async def invalid_body(response: Any) -> str:
    assert response.status == 400, await response.text()
    body = await response.json()
    assert body["error"]["code"] == "InvalidBody"
    message: str = body["error"]["message"]
    return message


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()[:200]
        assert len(record.getMessage()) < 2000


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ("a: " + "[" * 5000 + "]" * 5000, YAML),
        ("".join(f"{' ' * i}k:\n" for i in range(300)), YAML),
        ("[" * 3000 + "]" * 3000, {}),
        ("- " * 3000 + "x", {"Content-Type": "text/plain"}),
    ],
    ids=["yaml-flow", "yaml-block", "untyped-flow", "untyped-sequence"],
)
async def test_a_deeply_nested_yaml_body_is_400_naming_the_depth(
    client: Client, caplog: pytest.LogCaptureFixture, body: str, headers: dict[str, str]
) -> None:
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=body.encode(), headers=headers)
    assert "deeper than 100 levels" in await invalid_body(response)
    no_traceback(caplog)


async def test_a_deeply_nested_json_body_is_400(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    body = '{"kind": "Pod", "spec": ' + '{"a": ' * 500 + "1" + "}" * 500 + "}"
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=body, headers=JSON)
    assert "deeper than 100 levels" in await invalid_body(response)
    no_traceback(caplog)


async def test_an_alias_bomb_is_400_naming_the_node_limit(client: Client) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    response = await client.post(
        SIMULATE_SCHEDULE_PATH, data="\n".join(lines).encode(), headers=YAML
    )
    assert "more than 1000000 nodes" in await invalid_body(response)


async def test_annotations_over_256_kib_are_400_naming_the_limit(client: Client) -> None:
    pod: dict[str, Any] = orjson.loads(orjson.dumps(__import__("yaml").safe_load(GUIDE_POD)))
    pod["metadata"].setdefault("annotations", {})["big"] = "x" * (256 * 1024)
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=orjson.dumps(pod), headers=JSON)
    message = await invalid_body(response)
    assert "metadata.annotations" in message and "262144 bytes" in message


async def test_a_large_body_is_parsed_and_every_pod_simulated_off_the_event_loop(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[tuple[str, str]] = []
    parse = pod_body.parse_pod
    simulate = simulate_schedule.simulate_schedule

    def parse_recorded(*args: Any) -> Any:
        threads.append(("parse", threading.current_thread().name))
        return parse(*args)

    def simulate_recorded(*args: Any, **options: Any) -> Any:
        threads.append(("simulate", threading.current_thread().name))
        return simulate(*args, **options)

    monkeypatch.setattr(api_app, "parse_pod", parse_recorded)
    monkeypatch.setattr(api_app, "simulate_schedule", simulate_recorded)
    small = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    assert small.status == 200, await small.text()
    large = await client.post(SIMULATE_SCHEDULE_PATH, data=max_size_pod(), headers=YAML)
    assert large.status == 200, await large.text()
    worker = "offload-simulate-schedule"
    assert [(step, name.startswith(worker)) for step, name in threads] == [
        ("parse", False),  # 64 KiB or less: on the loop, bounded by the document limits
        ("simulate", True),
        ("parse", True),
        ("simulate", True),
    ], threads


async def test_simulations_are_refused_while_the_loop_is_behind(
    ready: FakeBackend,
) -> None:
    behind: list[str | None] = ["the event loop is 0.9 s behind (limit 0.5 s)"]
    app = create_api_app(ready, clock=lambda: GENERATED_AT, shed=lambda: behind[0])
    async with TestClient(TestServer(app)) as shedding:
        refused = await shedding.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
        assert refused.status == 429
        assert refused.headers["Retry-After"] == "1"
        message = (await refused.json())["error"]["message"]
        assert message == ("simulate-schedule: the event loop is 0.9 s behind (limit 0.5 s); retry")
        behind[0] = None
        accepted = await shedding.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
        assert accepted.status == 200


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_a_simulation_beyond_the_bound_is_429_before_any_work(
    client: Client, ready: FakeBackend, offload: BoundedOffload
) -> None:
    assert ready.inputs is not None
    release, started = threading.Event(), threading.Event()
    inner = ready.inputs.preparer

    def slow_preparer() -> PodPreparer:
        started.set()
        assert release.wait(DEADLINE_S)
        return inner()

    ready.inputs = dataclasses.replace(ready.inputs, preparer=slow_preparer)
    taken: list[int] = []
    original = ready.simulation_inputs

    def counted() -> Any:
        taken.append(1)
        return original()

    ready.simulation_inputs = counted  # type: ignore[method-assign]
    try:
        first = asyncio.create_task(
            client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
        )
        await until(started.is_set, "the first simulation to run")
        second = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
        assert second.status == 429
        assert second.headers["Retry-After"] == "2"
        body = await second.json()
        assert body["error"]["code"] == "TooManyRequests"
        assert "1 requests already in progress" in body["error"]["message"]
        assert taken == [1], "the refused request copied no simulation inputs"
    finally:
        release.set()
    assert (await first).status == 200
    await until(lambda: offload.in_flight == 0, "the slot to be free")
    third = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    assert third.status == 200


async def test_an_unexpected_failure_logs_one_line_with_the_type(
    client: Client, ready: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("x" * 100_000)
        deep(n - 1)

    try:
        deep(500)
    except RuntimeError as error:
        ready.inputs_error = error
    caplog.set_level(logging.DEBUG)
    response = await client.post(SIMULATE_SCHEDULE_PATH, data=GUIDE_POD, headers=YAML)
    assert response.status == 500
    body = await response.json()
    assert body["error"]["code"] == "InternalError"
    assert body["error"]["message"].startswith("RuntimeError: xxx")
    assert len(body["error"]["message"]) <= api_app.MAX_ERROR_TEXT
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1
    line = failures[0].getMessage()
    assert "RuntimeError" in line and "\n" not in line and len(line) < 1000
    assert "raised at" in line and "in deep" in line
    no_traceback(caplog)


def test_the_default_bound_is_one_thread() -> None:
    assert api_app.SIMULATION_THREADS == 1


async def test_the_app_builds_its_own_offload_and_closes_it() -> None:
    app = create_api_app(FakeBackend(), clock=lambda: GENERATED_AT)
    async with TestClient(TestServer(app)) as test_client:
        response = await test_client.post(SIMULATE_SCHEDULE_PATH, data=b"", headers=YAML)
        assert "empty body" in await invalid_body(response)
