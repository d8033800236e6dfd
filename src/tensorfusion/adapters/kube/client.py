"""The lightkube client of a process: in-cluster, or from a kubeconfig file out of cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Final, TypeAlias

import httpx
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.core.exceptions import ConfigError

__all__ = [
    "FIELD_MANAGER",
    "KEPT_ALIVE_CONNECTIONS",
    "KUBE_CALL_ERRORS",
    "KubeClient",
    "KubeClientError",
    "api_status_code",
    "api_status_message",
    "make_client",
    "raw_http",
    "server_version",
]

FIELD_MANAGER = "tensor-fusion"
DEFAULT_TIMEOUT_S = 30.0
KEPT_ALIVE_CONNECTIONS: Final = 20
"""The connections a client keeps open between calls (httpx's default): a burst of more calls at
once opens connections with a TLS handshake each and closes them afterwards, so callers that
send many at once keep below it."""


KubeClient: TypeAlias = AsyncClient
"""The Kubernetes API client (lightkube's), as the code outside adapters and runtime names it."""

KUBE_CALL_ERRORS: Final[tuple[type[Exception], ...]] = (ApiError, httpx.HTTPError)
"""What a call through a `KubeClient` raises: the API server's refusal (a Status; see
`api_status_code`) or a failure to reach it."""


class KubeClientError(RuntimeError):
    """No usable cluster configuration: names where it looked and what to pass."""


def api_status_code(error: BaseException) -> int | None:
    """The code of the API server's refusal (404, 409, ...); None for any other error."""
    return error.status.code if isinstance(error, ApiError) else None


def api_status_message(error: BaseException) -> str | None:
    """The message of the API server's refusal; None for any other error."""
    return error.status.message if isinstance(error, ApiError) else None


def make_client(kubeconfig: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> AsyncClient:
    """A client from `kubeconfig`, else the pod's ServiceAccount, else `~/.kube/config`."""
    try:
        if kubeconfig is not None:
            if not Path(kubeconfig).is_file():
                raise KubeClientError(f"--kubeconfig: {kubeconfig}: no such file")
            config = KubeConfig.from_file(kubeconfig)
        else:
            config = KubeConfig.from_env()
    except ConfigError as error:
        raise KubeClientError(
            f"no cluster configuration: {error}; run in a pod with a ServiceAccount or pass "
            "--kubeconfig FILE"
        ) from None
    return AsyncClient(
        config, timeout=httpx.Timeout(timeout_s), field_manager=FIELD_MANAGER, lazy=True
    )


def raw_http(client: AsyncClient) -> httpx.AsyncClient:
    """The HTTP client under a lightkube client (server address and credentials set), for the
    calls lightkube cannot make: non-resource paths, and subresources whose answer is a Status
    rather than the posted kind (`pods/binding`)."""
    http: httpx.AsyncClient = client._client._client  # type: ignore[assignment]
    return http


async def server_version(client: AsyncClient) -> str:
    """The API server's `gitVersion` (`GET /version`), e.g. `v1.37.2`."""
    response = await raw_http(client).get("/version")
    response.raise_for_status()
    return str(response.json()["gitVersion"])
