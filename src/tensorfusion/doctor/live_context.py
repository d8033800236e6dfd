"""What the live checks read, and how a check becomes a result whatever happens.

`LiveContext` reads the API server as JSON through the HTTP client under a lightkube client
(`GET` of objects and lists, the service and pod proxies), knows the release's object names
(deployment.md §6) and caches the reads several checks share. `run_check` turns a check's
`CheckOutcome`, or any error it raised, into a `CheckResult`: no permission is SKIP, anything else
FAIL with the reason, never a traceback.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from tensorfusion.adapters.http_client import HTTP_ERRORS, HttpClient, HttpResponse, http_client
from tensorfusion.domain.doctor.results import CheckResult, Status

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_RELEASE",
    "ApiCallError",
    "CheckOutcome",
    "LiveContext",
    "condition",
    "dig",
    "name_of",
    "parse_time",
    "response_message",
    "run_check",
    "utc_now",
]

DEFAULT_NAMESPACE: Final = "tensor-fusion-sys"
DEFAULT_RELEASE: Final = "tensor-fusion-sys"
CONTROLLER_LABEL: Final = "tensor-fusion.ai/component=operator"
API_PORT: Final = 8080
DIRECT_TIMEOUT_S: Final = 5.0
"""Seconds a call outside the API server (an Alertmanager, `--api-url`) may take."""


def utc_now() -> datetime.datetime:
    """The current time, timezone-aware."""
    return datetime.datetime.now(datetime.UTC)


def dig(values: Mapping[str, Any] | None, *keys: str) -> Any:
    """`values[k1][k2]...`, None where a level is missing or not a mapping."""
    current: Any = values
    for key in keys:
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def parse_time(text: object) -> datetime.datetime | None:
    """An RFC 3339 time of the API (`...Z`, with or without fractions), None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The status condition of type `kind`, {} when absent."""
    for item in dig(obj, "status", "conditions") or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return {}


def name_of(obj: Mapping[str, Any]) -> str:
    """`metadata.name`, `?` when absent."""
    return str(dig(obj, "metadata", "name") or "?")


class ApiCallError(Exception):
    """An API call that answered an error status: the call, the code and the server's message."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call}: {code} {message}".strip())
        self.call = call
        self.code = code
        self.message = message


class CheckOutcome(NamedTuple):
    """What a check found: its status, the finding and the fix (empty when passing)."""

    status: Status
    found: str
    fix: str = ""


def response_message(response: HttpResponse) -> str:
    """The `message` of a Kubernetes Status or an `{"error": {...}}` body, else the text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return f"{error.get('code', '')}: {error.get('message', '')}".strip(": ")
        if body.get("message"):
            return str(body["message"])
    return response.text.strip()[:300]


def _is_status(response: HttpResponse) -> bool:
    """Whether the body is a Kubernetes `Status` (the API server answered, not the proxied)."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == "Status"


@dataclass(slots=True)
class LiveContext:
    """The cluster as the live checks see it (see the module)."""

    http: HttpClient
    namespace: str = DEFAULT_NAMESPACE
    release: str = DEFAULT_RELEASE
    values: Mapping[str, Any] | None = None
    """The merged values when the user gave some: the webhook check compares with them."""
    clock: Callable[[], datetime.datetime] = utc_now
    direct: HttpClient | None = None
    """For addresses outside the API server (Alertmanagers, `api_url`); one is made when None."""
    api_url: str = ""
    """The controller's API reached directly (`--api-url`, after `kubectl port-forward`); ""
    goes through the API server's proxy of Service `<release>` (which reaches a pod only when
    `controller.apiBindAddress` is not loopback)."""
    _cache: dict[str, Any] = field(default_factory=dict)

    # ---- names of what the chart installs ------------------------------------------------

    @property
    def deployment_name(self) -> str:
        """`<release>-controller`."""
        return f"{self.release}-controller"

    @property
    def alertmanager_name(self) -> str:
        """`<release>-alert-manager` (StatefulSet)."""
        return f"{self.release}-alert-manager"

    @property
    def webhook_name(self) -> str:
        """`<release>-mutating-webhook` (MutatingWebhookConfiguration)."""
        return f"{self.release}-mutating-webhook"

    def service_proxy(self, path: str) -> str:
        """`path` of the controller's API through the API server's proxy of Service
        `<release>` port 8080."""
        return f"/api/v1/namespaces/{self.namespace}/services/{self.release}:{API_PORT}/proxy{path}"

    def pod_proxy(self, pod: str, port: int, path: str) -> str:
        """`path` on a pod's port through the API server's pod proxy."""
        return f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy{path}"

    # ---- reads ---------------------------------------------------------------------------

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, None when it does not exist (404)."""
        response = await self.http.get(path)
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ApiCallError(f"GET {path}", response.status_code, response_message(response))
        body: dict[str, Any] = response.json()
        return body

    async def items(self, path: str, selector: str = "") -> list[dict[str, Any]]:
        """The items of the list at `path` (with `labelSelector` when given); [] when the
        resource does not exist (no CRD)."""
        params = {"labelSelector": selector} if selector else None
        response = await self.http.get(path, params=params)
        if response.status_code == 404:
            return []
        if response.status_code >= 400:
            raise ApiCallError(f"GET {path}", response.status_code, response_message(response))
        found: list[dict[str, Any]] = response.json().get("items") or []
        return found

    async def cached(self, key: str, read: Callable[[], Awaitable[Any]]) -> Any:
        """`read()` once per context (the reads several checks share)."""
        if key not in self._cache:
            self._cache[key] = await read()
        return self._cache[key]

    async def deployment(self) -> dict[str, Any] | None:
        """The controller Deployment."""
        path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment_name}"
        found: dict[str, Any] | None = await self.cached("deployment", lambda: self.get(path))
        return found

    async def controller_pods(self) -> list[dict[str, Any]]:
        """The pods labelled `tensor-fusion.ai/component=operator` in the namespace."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        found: list[dict[str, Any]] = await self.cached(
            "controller-pods", lambda: self.items(path, CONTROLLER_LABEL)
        )
        return found

    async def controller_env(self, name: str) -> str | None:
        """A plain `value` of the Deployment's `controller` container env."""
        deployment = await self.deployment()
        for container in dig(deployment, "spec", "template", "spec", "containers") or ():
            if container.get("name") != "controller":
                continue
            for item in container.get("env") or ():
                if item.get("name") == name and "value" in item:
                    return str(item["value"])
        return None

    async def controller_api(
        self, method: str, path: str, content: bytes | None = None, content_type: str = ""
    ) -> HttpResponse:
        """A call of the controller's API: to `api_url` when given, else through the Service
        proxy; the answer whatever its status (a refused connection to `api_url` raises
        `ApiCallError` with code 0)."""
        if not self.api_url:
            return await self.proxy(method, self.service_proxy(path), content, content_type)
        headers = {"Content-Type": content_type} if content_type else None
        url = self.api_url.rstrip("/") + path
        direct = self.direct or http_client(DIRECT_TIMEOUT_S)
        try:
            return await direct.request(method, url, content=content, headers=headers)
        except HTTP_ERRORS as error:
            raise ApiCallError(f"{method} {url}", 0, f"{type(error).__name__}: {error}") from None
        finally:
            if direct is not self.direct:
                await direct.aclose()

    async def proxy(
        self, method: str, path: str, content: bytes | None = None, content_type: str = ""
    ) -> HttpResponse:
        """A call through one of the API server's proxies: the answer whatever its status,
        except the API server's own refusal (401, 403), which raises `ApiCallError`."""
        headers = {"Content-Type": content_type} if content_type else None
        response = await self.http.request(method, path, content=content, headers=headers)
        if response.status_code in (401, 403) and _is_status(response):
            raise ApiCallError(f"{method} {path}", response.status_code, response_message(response))
        return response


async def run_check(
    check_id: str, step: str, command: str, check: Callable[[], Awaitable[CheckOutcome]]
) -> CheckResult:
    """The result of one check; a refused read is SKIP, any other error FAIL, with the reason."""
    try:
        outcome = await check()
    except ApiCallError as error:
        if error.code in (401, 403):
            outcome = CheckOutcome(
                Status.SKIP,
                f"not permitted: {error}",
                "run with credentials that may read it (kubectl auth can-i)",
            )
        else:
            outcome = CheckOutcome(Status.FAIL, f"API error: {error}")
    except HTTP_ERRORS as error:
        outcome = CheckOutcome(
            Status.FAIL, f"API server unreachable: {type(error).__name__}: {error}"
        )
    except Exception as error:  # a check must report, never raise
        outcome = CheckOutcome(Status.FAIL, f"check failed: {type(error).__name__}: {error}")
    return CheckResult(check_id, step, outcome.status, outcome.found, outcome.fix, command)
