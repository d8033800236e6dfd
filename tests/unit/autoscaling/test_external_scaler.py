"""The external scaler (issue 28, scope 4): its settings and answer, bounded; and a real round
against a small HTTPS server on loopback: the key goes only where its Secret allows, never over
HTTP; a recommendation is applied in place; a failing scaler changes nothing and backs off."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tensorfusion.adapters.kube.secret_reads import SecretContent
from tensorfusion.controller.external_scaler import ExternalScalerCalls, ExternalScalerError
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.external_scaler import (
    ANSWER_MAX_BYTES,
    KEY_NAMESPACES_ANNOTATION,
    KEY_URL_ANNOTATION,
    ExternalAnswerError,
    parse_answer,
    parse_external,
)
from tensorfusion.domain.autoscaling.settings import AutoScaleConfigError
from tensorfusion.domain.model.autoscaling import ExternalScaler

from ...peer_tls import release_bundle, serving
from ...standins.external_scaler import ScalerServer
from ..allocator.builders import POOL
from .test_autoscaler_round import GIB, Setup, _usage_rows, _workload

NS = "tf-sys"
CURRENT = (ResourceAmount(tflops_milli=100_000, vram_bytes=20 * GIB),
           ResourceAmount(tflops_milli=100_000, vram_bytes=20 * GIB))  # fmt: skip


def _spec(**fields: Any) -> ExternalScaler:
    return ExternalScaler.model_validate({"enable": True, "url": "https://scaler.example/r",
                                          "apiKeySecretRef": {"name": "k"}, **fields})  # fmt: skip


@pytest.mark.parametrize(("fields", "problem"), [
    ({"url": ""}, "url: required"),
    ({"url": "ftp://scaler/r"}, "is not an http"),
    ({"url": "https://user:pw@scaler/r"}, "credentials in the URL"),
    ({"url": "https://scaler:99999/r"}, "port 99999 is out of range"),
    ({"apiKeySecretRef": {"name": "k", "namespace": "team-b"}}, f"must be {NS}"),
    ({"apiKeySecretRef": {"namespace": NS}}, "apiKeySecretRef.name: required"),
    ({"apiKeySecretRef": None}, "registered by the operator"),
    ({"interval": "1s"}, "externalScaler.interval"),
    ({"initialDelayPeriod": "forever"}, "externalScaler.initialDelayPeriod"),
])  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(AutoScaleConfigError, match=problem):
        parse_external(_spec(**fields), release_namespace=NS)


def test_settings_defaults_and_a_disabled_scaler() -> None:
    parsed = parse_external(_spec(), release_namespace=NS)
    assert parsed is not None and (parsed.secret_name, parsed.interval_s) == ("k", 60.0)
    assert parse_external(_spec(enable=False), release_namespace=NS) is None
    plain = parse_external(_spec(url="http://127.0.0.1:9/r"), release_namespace=NS)
    assert plain is not None and plain.url.startswith("http://")  # a key is refused at the call


@pytest.mark.parametrize(("body", "problem"), [
    (b"{", "not JSON"),
    (b"[]", "JSON object"),
    (b'{"recommendation": 3}', "object or null"),
    (b'{"recommendation": {"requests": {"tflops": "lots"}}}', "requests.tflops"),
    (b'{"recommendation": {"requests": {"gpus": "2"}}}', "unknown fields"),
    (b'{"recommendation": {"requests": {"tflops": "50"}, "limits": {"tflops": "40"}}}',
     "below its request"),
    (b'{"recommendation": {"requests": {"vram": true}}}', "quantity string"),
    (b'{"recommendation": {"request": {"tflops": "50"}}}', "unknown fields"),
    (b'{"recomendation": null}', "unknown fields"),
    (b'{"recommendation": {"requests": []}}', "must be an object"),
    (b'{"recommendation": {"requests": {"tflops": "0"}}}', "must be above 0"),
    (b" " * (ANSWER_MAX_BYTES + 1), "larger than"),
    (b"[" * 100_000 + b"]" * 100_000, "larger than"),
])  # fmt: skip
def test_a_bad_answer_is_refused(body: bytes, problem: str) -> None:
    with pytest.raises(ExternalAnswerError, match=problem):
        parse_answer(body, CURRENT)


def test_a_workload_sized_in_percent_gets_no_tflops() -> None:
    percent = (ResourceAmount(percent_milli=50_000, vram_bytes=GIB),
               ResourceAmount(percent_milli=50_000, vram_bytes=GIB))  # fmt: skip
    with pytest.raises(ExternalAnswerError, match="percent"):
        parse_answer(b'{"recommendation": {"requests": {"tflops": "40"}}}', percent)
    found, _ = parse_answer(b'{"recommendation": {"requests": {"vram": "2Gi"}}}', percent)
    assert found is not None and found.requests.percent_milli == 50_000
    assert found.requests.tflops_milli == 0 and found.requests.vram_bytes == 2 * GIB


def test_an_answer_keeps_what_it_leaves_out() -> None:
    found, why = parse_answer(json.dumps({"recommendation": {"requests": {"tflops": "40"}},
                                          "reason": "quiet"}).encode(), CURRENT)  # fmt: skip
    assert found is not None and why == "quiet"
    assert found.requests == ResourceAmount(tflops_milli=40_000, vram_bytes=20 * GIB)
    assert found.limits == CURRENT[1]  # the old limit is still above the new request
    assert parse_answer(b'{"recommendation": null}', CURRENT)[0] is None
    same = {"recommendation": {"requests": {"tflops": "100"}}}
    assert parse_answer(json.dumps(same).encode(), CURRENT)[0] is None


class Scaler:
    def __init__(self, server: ScalerServer, url: str, ca: bytes) -> None:
        self.server, self.url, self.ca = server, url, ca
        self.secret: SecretContent | None = SecretContent(
            {"api-key": b"s3cret-key", "ca.crt": ca},
            {KEY_URL_ANNOTATION: url, KEY_NAMESPACES_ANNOTATION: "other, ml"},
        )
        self.reads: list[str] = []

    async def read(self, name: str) -> SecretContent | None:
        self.reads.append(name)
        return self.secret if name == "scaler-key" else None


@pytest.fixture
async def scaler() -> AsyncIterator[Scaler]:
    bundle = release_bundle("127.0.0.1")
    server = ScalerServer(serving(bundle))
    url = await server.start()
    try:
        yield Scaler(server, url, bundle.ca_pem or b"")
    finally:
        await server.stop()


def _setup(scaler: Scaler, **external: Any) -> Setup:
    workload = _workload("infer", None)
    workload["spec"]["autoScalingConfig"] = {"externalScaler": {
        "enable": True, "url": scaler.url, "initialDelayPeriod": "0s",
        "apiKeySecretRef": {"name": "scaler-key", "namespace": NS}, **external}}  # fmt: skip
    setup = Setup(workload)
    setup.autoscaler.external = ExternalScalerCalls(scaler.read, NS)
    setup.autoscaler.namespace = NS
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    return setup


async def test_the_scaler_recommendation_is_applied_in_place(scaler: Scaler) -> None:
    scaler.server.answer = {"recommendation": {"requests": {"tflops": "40", "vram": "8Gi"},
                                               "limits": {"tflops": "60", "vram": "8Gi"}},
                            "reason": "quiet at night"}  # fmt: skip
    setup = _setup(scaler)
    [outcome] = await setup.autoscaler.round(setup.store)
    assert (outcome.reason, outcome.message) == ("Resized", "external scaler: quiet at night")
    record = setup.allocator.records["infer-0"].request
    assert (record.request.tflops_milli, record.limit.tflops_milli) == (40_000, 60_000)
    assert record.request.vram_bytes == 8 * GIB
    [(authorization, body)] = scaler.server.seen
    assert authorization == "Bearer s3cret-key"
    assert body["workload"] == {"namespace": "ml", "name": "infer", "pool": POOL}
    assert body["current"]["requests"] == {"tflops": "100", "vram": "20Gi"}
    assert body["usage"]["tflops"]["samples"] == 100
    assert body["usage"]["tflops"]["percentiles"]["p95"] == pytest.approx(20.0)
    assert setup.events.recorded[-1][1] == "Resized"


@pytest.mark.parametrize(("annotations", "data", "problem"), [
    ({KEY_URL_ANNOTATION: "https://elsewhere/r", KEY_NAMESPACES_ANNOTATION: "*"},
     {"api-key": b"s3cret-key"}, KEY_URL_ANNOTATION),
    ({KEY_NAMESPACES_ANNOTATION: "team-a"}, {"api-key": b"s3cret-key"},
     KEY_NAMESPACES_ANNOTATION),
    ({KEY_NAMESPACES_ANNOTATION: "*"}, {"api-key": b"s3cret\rkey"}, "visible ASCII"),
])  # fmt: skip
async def test_the_scaler_is_called_only_as_its_secret_allows(
    scaler: Scaler, annotations: dict[str, str], data: dict[str, bytes], problem: str
) -> None:
    scaler.secret = SecretContent(data, {KEY_URL_ANNOTATION: scaler.url, **annotations})
    setup = _setup(scaler)
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "ExternalScalerFailed" and problem in outcome.message
    assert "s3cret" not in outcome.message
    assert scaler.server.seen == []  # nothing was sent
    assert setup.allocator.records["infer-0"].request.request.tflops_milli == 100_000


async def test_a_key_is_never_sent_over_http() -> None:
    calls = ExternalScalerCalls(_secret_of, NS)
    settings = parse_external(_spec(url="http://127.0.0.1:9/r"), release_namespace=NS)
    assert settings is not None
    with pytest.raises(ExternalScalerError, match="only over https"):
        await calls.recommend(("ml", "w"), settings, body={}, current=CURRENT, now=0.0)


async def _secret_of(name: str) -> SecretContent:
    return SecretContent({"api-key": b"k"}, {KEY_URL_ANNOTATION: "http://127.0.0.1:9/r",
                                             KEY_NAMESPACES_ANNOTATION: "*"})  # fmt: skip


async def test_a_scaler_that_trickles_is_cut_at_the_call_bound(scaler: Scaler) -> None:
    scaler.server.delay_s = 30.0
    setup = _setup(scaler)
    assert setup.autoscaler.external is not None
    setup.autoscaler.external.timeout_s = 0.5
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "ExternalScalerFailed" and "within 0.5 s" in outcome.message


@pytest.mark.parametrize(("status", "answer", "problem"), [
    (500, {"recommendation": None}, "HTTP 500"),
    (200, {"recommendation": {"requests": {"tflops": "-3"}}}, "answered badly"),
])  # fmt: skip
async def test_a_failing_scaler_changes_nothing_and_backs_off(
    scaler: Scaler, status: int, answer: Any, problem: str
) -> None:
    scaler.server.status, scaler.server.answer = status, answer
    setup = _setup(scaler, interval="10s")
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "ExternalScalerFailed" and problem in outcome.message
    assert "next call in 30 s" in outcome.message
    assert setup.allocator.records["infer-0"].request.request.tflops_milli == 100_000
    status_written = setup.api.objects[("TensorFusionWorkload", "ml", "infer")]["status"]
    assert status_written["conditions"][-1]["reason"] == "ExternalScalerFailed"
    clock = setup.autoscaler.clock
    setup.autoscaler.clock = lambda: clock() + 15  # past the interval, within the backoff
    assert await setup.autoscaler.round(setup.store) == []
    assert len(scaler.server.seen) == 1


async def test_a_scaler_the_ca_does_not_trust_is_not_called(scaler: Scaler) -> None:
    assert scaler.secret is not None
    scaler.secret = SecretContent({"api-key": b"k", "ca.crt": release_bundle().ca_pem or b""},
                                  scaler.secret.annotations)  # fmt: skip
    setup = _setup(scaler)
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "ExternalScalerFailed" and "cannot be reached" in outcome.message
    assert scaler.server.seen == []


async def test_the_backoff_is_per_url_and_forgotten_with_the_scaler() -> None:
    calls = ExternalScalerCalls(_secret_of, NS)
    settings = parse_external(_spec(url="http://127.0.0.1:9/r"), release_namespace=NS)
    assert settings is not None
    with pytest.raises(ExternalScalerError):  # a key over http: a failure like any other
        await calls.recommend(("ml", "w"), settings, body={}, current=CURRENT, now=0.0)
    assert calls.waiting(("ml", "w"), settings.url, 29.0)
    assert not calls.waiting(("ml", "w"), settings.url, 31.0)
    assert not calls.waiting(("ml", "w"), "https://fixed.example/r", 1.0)  # a changed URL
    calls.keep_only(set())
    assert not calls.waiting(("ml", "w"), settings.url, 1.0)
