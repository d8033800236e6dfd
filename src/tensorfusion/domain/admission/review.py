"""AdmissionReview v1 for the pod webhook (admission.md §1, §2): the request read, the answer
written.

`read_review` takes the decoded JSON body and returns the fields the webhook uses, or raises
`ReviewError` (the webhook answers HTTP 400). `review_answer` turns an `AdmissionDecision` into
the AdmissionReview response: HTTP 200 always, the request's `uid`, `patchType: JSONPatch` with
the base64 RFC 6902 patch when mutated, `status` with code, reason and message when denied, and
the warnings. `unavailable_answer` is the 503 of a transient failure
(`"<operation> failed, retry: <error>"`); nothing is ever answered with 500.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from tensorfusion.domain.admission.decision import AdmissionDecision

__all__ = [
    "API_VERSION",
    "AdmissionRequest",
    "ReviewError",
    "allowed_answer",
    "read_review",
    "review_answer",
    "unavailable_answer",
]

API_VERSION: Final = "admission.k8s.io/v1"
_KIND: Final = "AdmissionReview"
_REASONS: Final = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 503: "ServiceUnavailable"}
MAX_WARNING_LENGTH: Final = 256
"""The API server cuts each warning to 256 characters once a response's warnings pass 4 KiB;
a longer one is cut here, keeping its start (where our warnings say what happened)."""


class ReviewError(ValueError):
    """The body is not an AdmissionReview the webhook can answer; says what is wrong."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """What the webhook reads of `request`."""

    uid: str
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any]
    kind: str = "Pod"
    dry_run: bool = False

    @property
    def is_pod_create(self) -> bool:
        """Whether the pipeline applies (CREATE of a core/v1 Pod)."""
        return self.operation == "CREATE" and self.kind == "Pod"


def _text(value: object, where: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ReviewError(f"{where} must be a non-empty string, got {value!r}")
    return value


def read_review(body: object) -> AdmissionRequest:
    """The request of an AdmissionReview v1; ReviewError names the field that is wrong."""
    if not isinstance(body, Mapping):
        raise ReviewError(f"the body must be a JSON object (an AdmissionReview), got {body!r:.80}")
    if body.get("kind") != _KIND or body.get("apiVersion") != API_VERSION:
        raise ReviewError(
            f"apiVersion/kind must be {API_VERSION}/{_KIND}, got "
            f"{body.get('apiVersion')!r}/{body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError(f"request must be an object, got {request!r:.80}")
    uid = _text(request.get("uid"), "request.uid", required=True)
    raw_kind = request.get("kind")
    kind: Mapping[str, Any] = raw_kind if isinstance(raw_kind, Mapping) else {}
    pod = request.get("object")
    operation = _text(request.get("operation"), "request.operation", required=True)
    if operation == "CREATE" and not isinstance(pod, Mapping):
        raise ReviewError(f"request.object must be the pod being created, got {pod!r:.80}")
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ReviewError(f"request.dryRun must be true or false, got {dry_run!r}")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        namespace=_text(request.get("namespace"), "request.namespace"),
        name=_text(request.get("name"), "request.name"),
        object=pod if isinstance(pod, Mapping) else {},
        kind=str(kind.get("kind") or "Pod"),
        dry_run=dry_run,
    )


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": _KIND, "response": response}


def _warnings(warnings: tuple[str, ...]) -> list[str]:
    return [w if len(w) <= MAX_WARNING_LENGTH else w[: MAX_WARNING_LENGTH - 1] + "…"
            for w in warnings]  # fmt: skip


def allowed_answer(uid: str) -> dict[str, Any]:
    """Allowed, unchanged (pods the webhook does not handle)."""
    return _review({"uid": uid, "allowed": True})


def review_answer(uid: str, decision: AdmissionDecision) -> dict[str, Any]:
    """The AdmissionReview response of a decision."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        patch = orjson.dumps(list(decision.patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode()
    if not decision.allowed:
        code = decision.code if decision.code and decision.code != 500 else 400
        response["status"] = {
            "code": code,
            "reason": decision.reason or _REASONS.get(code, "BadRequest"),
            "message": decision.message,
        }
    if decision.warnings:
        response["warnings"] = _warnings(decision.warnings)
    return _review(response)


def unavailable_answer(uid: str, operation: str, error: object) -> dict[str, Any]:
    """A transient failure: denied with 503, the pod's creation is retried by its owner."""
    return _review({
        "uid": uid,
        "allowed": False,
        "status": {"code": 503, "reason": _REASONS[503],
                   "message": f"{operation} failed, retry: {error}"},
    })  # fmt: skip
