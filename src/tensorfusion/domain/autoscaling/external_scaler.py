"""The external scaler's contract (docs/autoscaling.md, "External scaler"): its settings parsed
and bounded, the request body the autoscaler posts, and the answer read back strictly.

A scaler is registered by the operator with a Secret in the release namespace (the controller
may read no other): it lists the scaler's URLs (`KEY_URL_ANNOTATION`) and the namespaces whose
workloads may use it (`KEY_NAMESPACES_ANNOTATION`), and may hold its API key. A workload names
that Secret; the controller calls only a URL it lists, for a namespace it lists, so a workload
can neither send another team's key to an address of its choosing nor make the leader call an
arbitrary address. A key is never sent over plain HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_values import parse_tflops_milli, parse_vram_bytes
from tensorfusion.domain.autoscaling.recommendation import Recommendation, UsagePercentiles
from tensorfusion.domain.autoscaling.settings import (
    MIN_INTERVAL_S,
    AutoScaleConfigError,
    parse_seconds,
)
from tensorfusion.domain.autoscaling.usage_query import PercentileSet
from tensorfusion.domain.model.autoscaling import ExternalScaler

__all__ = [
    "ANSWER_MAX_BYTES",
    "API_KEY_KEY",
    "CA_KEY",
    "KEY_NAMESPACES_ANNOTATION",
    "KEY_URL_ANNOTATION",
    "ExternalAnswerError",
    "ExternalScalerSettings",
    "UsageSummary",
    "key_problem",
    "key_use_problem",
    "parse_answer",
    "parse_external",
    "scale_request",
]

API_KEY_KEY: Final = "api-key"
"""The Secret's key holding the API key, sent as `Authorization: Bearer <key>`."""
CA_KEY: Final = "ca.crt"
"""The Secret's optional key holding the PEM CA the scaler's certificate is checked against
(the system's trust store without it)."""
KEY_URL_ANNOTATION: Final = "tensor-fusion.ai/external-scaler-url"
"""The Secret's annotation listing (comma-separated) the exact URLs the scaler answers at."""
KEY_NAMESPACES_ANNOTATION: Final = "tensor-fusion.ai/external-scaler-namespaces"
"""The Secret's annotation listing (comma-separated) the namespaces whose workloads may use the
scaler; `*`: every namespace."""
_KEY: Final = re.compile(rb"[\x21-\x7e]{1,4096}")
"""A usable API key: visible ASCII only (a header value that can never be refused)."""
ANSWER_MAX_BYTES: Final = 64 * 1024
MAX_URL_CHARS: Final = 2048
_URL: Final = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#\s]+)(?P<rest>[/?#]\S*)?")
DEFAULT_INTERVAL_S: Final = 60.0
DEFAULT_INITIAL_DELAY_S: Final = 1_800.0


class ExternalAnswerError(ValueError):
    """The scaler's answer cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ExternalScalerSettings:
    """One workload's external scaler: where, with which key, how often (seconds)."""

    url: str
    secret_name: str
    """The Secret in the release namespace that registers the scaler (and may hold its key)."""
    initial_delay_period_s: float = DEFAULT_INITIAL_DELAY_S
    interval_s: float = DEFAULT_INTERVAL_S


def parse_external(
    spec: ExternalScaler | None, *, release_namespace: str
) -> ExternalScalerSettings | None:
    """The settings of an enabled scaler (None when absent or disabled); AutoScaleConfigError
    naming the field on a bad one."""
    if spec is None or not spec.enable:
        return None
    url = (spec.url or "").strip()
    if not url:
        raise AutoScaleConfigError("externalScaler.url: required when the scaler is enabled")
    if len(url) > MAX_URL_CHARS:
        raise AutoScaleConfigError(f"externalScaler.url: longer than {MAX_URL_CHARS} characters")
    parts = _URL.fullmatch(url)
    if parts is None:
        raise AutoScaleConfigError(f'externalScaler.url: "{url[:200]}" is not an http(s) URL')
    if "@" in parts["authority"]:
        raise AutoScaleConfigError("externalScaler.url: credentials in the URL are refused; "
                                   "use apiKeySecretRef")  # fmt: skip
    port = parts["authority"].rpartition(":")[2]
    if ":" in parts["authority"] and port.isdigit() and not 0 < int(port) < 65536:
        raise AutoScaleConfigError(f"externalScaler.url: port {port} is out of range")
    ref = spec.api_key_secret_ref
    secret = (ref.name or "").strip() if ref is not None else ""
    if not secret:
        raise AutoScaleConfigError(
            "externalScaler.apiKeySecretRef.name: required: scalers are registered by the "
            f"operator with a Secret in {release_namespace} (docs/autoscaling.md)"
        )
    if ref is not None and (ref.namespace or release_namespace) != release_namespace:
        raise AutoScaleConfigError(
            f"externalScaler.apiKeySecretRef.namespace: must be {release_namespace} (the "
            "controller reads scalers' Secrets only from its own namespace)"
        )
    return ExternalScalerSettings(
        url=url,
        secret_name=secret,
        initial_delay_period_s=parse_seconds("externalScaler.initialDelayPeriod",
                                             spec.initial_delay_period,
                                             DEFAULT_INITIAL_DELAY_S, 0.0),
        interval_s=parse_seconds("externalScaler.interval", spec.interval,
                                 DEFAULT_INTERVAL_S, MIN_INTERVAL_S),
    )  # fmt: skip


def _listed(annotations: Mapping[str, str], key: str) -> list[str]:
    return [item.strip() for item in str(annotations.get(key) or "").split(",")]


def key_use_problem(
    secret_name: str, annotations: Mapping[str, str], *, url: str, namespace: str
) -> str:
    """Why the scaler Secret `secret_name` registers may not be called at `url` for a workload
    of `namespace` ("" when it may)."""
    if url not in _listed(annotations, KEY_URL_ANNOTATION):
        return (f"Secret {secret_name} does not register a scaler at {url[:200]}: its "
                f"annotation {KEY_URL_ANNOTATION} must list that URL")  # fmt: skip
    namespaces = _listed(annotations, KEY_NAMESPACES_ANNOTATION)
    if "*" not in namespaces and namespace not in namespaces:
        return (f"Secret {secret_name} does not let namespace {namespace} use its scaler: its "
                f"annotation {KEY_NAMESPACES_ANNOTATION} must list it (or *)")  # fmt: skip
    return ""


def key_problem(key: bytes, url: str) -> str:
    """Why `key` cannot be sent to `url` ("" when it can; an empty key is not sent)."""
    if not key:
        return ""
    if not _KEY.fullmatch(key):
        return "its api-key is not one line of visible ASCII (at most 4096 characters)"
    if not url.startswith("https://"):
        return "an API key is sent only over https, not http"
    return ""


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """A workload's usage over the window as the autoscaler read it (None: no samples)."""

    window_s: float
    percentiles: PercentileSet
    compute: UsagePercentiles | None
    vram: UsagePercentiles | None


def _usage(name: str, usage: UsagePercentiles | None, unit: float, fractions: tuple[float, ...]
           ) -> dict[str, Any] | None:  # fmt: skip
    if usage is None:
        return None
    values = (usage.lower, usage.target, usage.upper)
    return {"samples": usage.samples,
            "percentiles": {f"p{round(f * 100, 2):g}": round(v / unit, 3)
                            for f, v in zip(fractions, values, strict=True)},
            "unit": name}  # fmt: skip


def _amounts(requests: ResourceAmount, limits: ResourceAmount) -> dict[str, Any]:
    return {"requests": requests.to_json(), "limits": limits.to_json()}


def scale_request(
    *,
    workload: tuple[str, str],
    pool: str,
    original: tuple[ResourceAmount, ResourceAmount],
    current: tuple[ResourceAmount, ResourceAmount],
    usage: UsageSummary,
    time: str,
) -> dict[str, Any]:
    """The JSON body posted to the scaler for one workload."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "ScaleRequest",
        "workload": {"namespace": workload[0], "name": workload[1], "pool": pool},
        "original": _amounts(*original),
        "current": _amounts(*current),
        "usage": {
            "windowSeconds": int(usage.window_s),
            "tflops": _usage("TFLOPS", usage.compute, 1000.0, usage.percentiles.compute),
            "vram": _usage("bytes", usage.vram, 1.0, usage.percentiles.vram),
        },
        "time": time,
    }


def _known(value: Mapping[str, Any], fields: set[str], where: str) -> None:
    unknown = set(value) - fields
    if unknown:
        raise ExternalAnswerError(f"{where}: unknown fields {sorted(map(str, unknown))[:5]}")


def _amount(value: Any, where: str) -> ResourceAmount:
    if not isinstance(value, Mapping):
        raise ExternalAnswerError(f"{where}: must be an object with tflops and/or vram")
    _known(value, {"tflops", "vram"}, where)
    parsed = {}
    for name, parse in (("tflops", parse_tflops_milli), ("vram", parse_vram_bytes)):
        text = value.get(name)
        if text is None:
            continue
        if not isinstance(text, str | int | float) or isinstance(text, bool):
            raise ExternalAnswerError(f"{where}.{name}: must be a quantity string")
        try:
            parsed[name] = parse(str(text))
        except ValueError as error:
            raise ExternalAnswerError(f"{where}.{name}: {error}") from None
        if parsed[name] <= 0:
            raise ExternalAnswerError(f"{where}.{name}: must be above 0 (leave it out to keep it)")
    return ResourceAmount(tflops_milli=parsed.get("tflops", 0), vram_bytes=parsed.get("vram", 0))


def parse_answer(
    body: bytes, current: tuple[ResourceAmount, ResourceAmount]
) -> tuple[Recommendation | None, str]:
    """The scaler's recommendation (None: no change) and its reason, from the answer's body:
    `{"recommendation": {"requests": {...}, "limits": {...}} | null, "reason": "..."}`. A
    resource the answer leaves out keeps its current value; a limit below its request is
    refused."""
    if len(body) > ANSWER_MAX_BYTES:
        raise ExternalAnswerError(f"the answer is larger than {ANSWER_MAX_BYTES} bytes")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise ExternalAnswerError("the answer is not JSON") from None
    if not isinstance(document, Mapping):
        raise ExternalAnswerError("the answer must be a JSON object")
    _known(document, {"recommendation", "reason"}, "the answer")
    reason = document.get("reason")
    reason = reason[:300] if isinstance(reason, str) else ""
    found = document.get("recommendation")
    if found is None:
        return None, reason or "the external scaler recommends no change"
    if not isinstance(found, Mapping):
        raise ExternalAnswerError("recommendation: must be an object or null")
    _known(found, {"requests", "limits"}, "recommendation")
    asked_requests = _amount(found.get("requests", {}), "recommendation.requests")
    asked_limits = _amount(found.get("limits", {}), "recommendation.limits")
    (cur_req, cur_lim) = current
    if cur_req.percent_milli and (asked_requests.tflops_milli or asked_limits.tflops_milli):
        raise ExternalAnswerError("recommendation: this workload asks compute as a percent of "
                                  "a GPU; the answer may size its vram only")  # fmt: skip
    requests = ResourceAmount(
        tflops_milli=asked_requests.tflops_milli or cur_req.tflops_milli,
        percent_milli=cur_req.percent_milli,
        vram_bytes=asked_requests.vram_bytes or cur_req.vram_bytes,
    )
    limits = ResourceAmount(
        tflops_milli=asked_limits.tflops_milli or max(cur_lim.tflops_milli, requests.tflops_milli),
        percent_milli=cur_lim.percent_milli,
        vram_bytes=asked_limits.vram_bytes or max(cur_lim.vram_bytes, requests.vram_bytes),
    )
    if limits.tflops_milli < requests.tflops_milli or limits.vram_bytes < requests.vram_bytes:
        raise ExternalAnswerError("recommendation: a limit is below its request")
    if (requests, limits) == current:
        return None, reason or "the external scaler recommends the current resources"
    return Recommendation(requests, limits, None, None), reason or "external scaler"
