"""`POST /mutate-v1-pod` (admission.md §1, §2): the AdmissionReview in, the answer out.

The handler only decodes, delegates and encodes: an `Admitter` gathers the facts the pipeline
needs, runs `admit`, performs its writes (not on a dry run) and returns the decision. Every
decodable AdmissionReview gets HTTP 200; an undecodable body HTTP 400; any failure of the
admitter a 503 denial `"<operation> failed, retry: <error>"`, never a 500. Pods that are not
being created, and other kinds, are allowed unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Final, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram

from tensorfusion.domain.admission.decision import AdmissionDecision
from tensorfusion.domain.admission.review import (
    AdmissionRequest,
    ReviewError,
    allowed_answer,
    read_review,
    review_answer,
    unavailable_answer,
)
from tensorfusion.runtime import web

__all__ = [
    "MUTATE_PATH",
    "Admitter",
    "TransientAdmissionError",
    "WebhookMetrics",
    "create_webhook_app",
]

_log = logging.getLogger(__name__)

MUTATE_PATH: Final = "/mutate-v1-pod"
MAX_BODY: Final = 8 * 1024 * 1024


class TransientAdmissionError(Exception):
    """A transient failure of one step (an API call, the leader's index): answered with 503
    `"<operation> failed, retry: <error>"`."""

    def __init__(self, operation: str, error: object) -> None:
        super().__init__(f"{operation} failed, retry: {error}")
        self.operation = operation
        self.error = error


class Admitter(Protocol):
    """Facts, `admit`, writes: the decision for one pod CREATE."""

    async def admit(self, request: AdmissionRequest) -> AdmissionDecision: ...


class WebhookMetrics:
    """Admission latency and outcomes."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.seconds = Histogram(
            "tf_webhook_admission_seconds", "Time to answer one AdmissionReview",
            registry=registry,
        )  # fmt: skip
        self.outcomes = Counter(
            "tf_webhook_admissions_total", "AdmissionReviews answered, by outcome",
            ["outcome"], registry=registry,
        )  # fmt: skip


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def create_webhook_app(admitter: Admitter, metrics: WebhookMetrics) -> web.Application:
    """The webhook's aiohttp application (serve it over TLS)."""
    app = web.Application(client_max_size=MAX_BODY)

    async def mutate(http: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            try:
                request = read_review(orjson.loads(await http.read()))
            except (orjson.JSONDecodeError, ReviewError) as error:
                metrics.outcomes.labels("bad-request").inc()
                return web.Response(status=400, text=f"not an AdmissionReview v1: {error}")
            if not request.is_pod_create:
                metrics.outcomes.labels("untouched").inc()
                return _json(allowed_answer(request.uid))
            try:
                decision = await admitter.admit(request)
            except TransientAdmissionError as failure:
                _log.warning("pod %s/%s: %s", request.namespace, request.name, failure)
                metrics.outcomes.labels("unavailable").inc()
                return _json(unavailable_answer(request.uid, failure.operation, failure.error))
            except Exception as error:
                _log.exception("pod %s/%s: admission failed", request.namespace, request.name)
                metrics.outcomes.labels("unavailable").inc()
                detail = f"{type(error).__name__}: {error}"
                return _json(unavailable_answer(request.uid, "admission", detail))
            metrics.outcomes.labels(decision.outcome.value).inc()
            return _json(review_answer(request.uid, decision))
        finally:
            metrics.seconds.observe(time.perf_counter() - started)

    app.router.add_post(MUTATE_PATH, mutate)
    return app
