"""The controller's HTTP API on port 8080 (scheduling.md §16).

`create_api_app(backend)` returns the aiohttp application; the app layer may add routes (the
embedded store's write path) before serving it, and names the path prefixes a follower forwards
to the leader (`forward_prefixes`). Every `/api/*` request but `GET /api/alerts` and
`GET /api/config` is answered by the leader: a follower forwards it (`forwarding.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tensorfusion.api_server.auth import require_controller_service_account
from tensorfusion.api_server.backend import ApiBackend
from tensorfusion.api_server.forwarding import LeaderForwarder
from tensorfusion.api_server.pod_body import parse_pod, read_pod_body
from tensorfusion.api_server.responses import ApiError, error_response, json_response
from tensorfusion.domain.admission.dry_run import PreparationError, not_a_gpu_worker
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.snapshot import allocation_view, nodes_view, pools_view
from tensorfusion.domain.simulate_schedule import UnknownNodesError, simulate_schedule

__all__ = [
    "ALERTS_PATH",
    "ALLOCATION_PATH",
    "API_PREFIX",
    "ASSIGN_INDEX_PATH",
    "CONFIG_PATH",
    "MAX_FORWARDED_BODY",
    "NODES_PATH",
    "POOLS_PATH",
    "SIMULATE_SCHEDULE_PATH",
    "create_api_app",
]

_log = logging.getLogger(__name__)

API_PREFIX: Final = "/api/"
SIMULATE_SCHEDULE_PATH: Final = "/api/simulate-schedule"
ALLOCATION_PATH: Final = "/api/allocation"
POOLS_PATH: Final = "/api/pools"
NODES_PATH: Final = "/api/nodes"
ALERTS_PATH: Final = "/api/alerts"
CONFIG_PATH: Final = "/api/config"
ASSIGN_INDEX_PATH: Final = "/api/assign-index"
LOCAL_PATHS: Final = frozenset({ALERTS_PATH, CONFIG_PATH})
"""Answered by the replica that receives them, never forwarded (alerting.md §9)."""

MAX_FORWARDED_BODY: Final = 8 * 1024 * 1024
"""Bytes a follower reads to forward (the store's write path takes 8 MiB); more is 413."""

_HTTP_CODES: Final = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
}


def _query(request: web.Request, name: str) -> str | None:
    value = request.query.get(name, "").strip()
    return value or None


def _flag(request: web.Request, name: str, default: bool) -> bool:
    value = _query(request, name)
    if value is None:
        return default
    if value.lower() in {"true", "false"}:
        return value.lower() == "true"
    raise ApiError(400, "InvalidQuery", f"{name}: invalid value {value!r}: use true or false")


def _node_names(request: web.Request) -> list[str] | None:
    value = _query(request, "nodes")
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    return names or None


def _allocator_not_ready() -> ApiError:
    return ApiError(
        503, "AllocatorNotReady",
        "the allocator is not ready yet: it is being rebuilt from the cluster; retry",
        {"Retry-After": "5"},
    )  # fmt: skip


class _Handlers:
    def __init__(self, backend: ApiBackend, clock: Callable[[], float]) -> None:
        self.backend = backend
        self.clock = clock

    def _allocator(self) -> Allocator:
        allocator = self.backend.allocator()
        if allocator is None:
            raise _allocator_not_ready()
        return allocator

    async def simulate(self, request: web.Request) -> web.StreamResponse:
        manifest = parse_pod(await read_pod_body(request), request.content_type)
        problem = not_a_gpu_worker(manifest)
        if problem is not None:
            raise ApiError(400, "NotAGPUWorker", problem)
        mutate = _flag(request, "mutate", default=True)
        nodes = _node_names(request)
        inputs = self.backend.simulation_inputs()
        if inputs is None:
            raise _allocator_not_ready()
        try:
            body = simulate_schedule(
                manifest, inputs.preparer, inputs.native, inputs.allocator, inputs.args,
                inputs.weights, nodes, mutate,
            )  # fmt: skip
        except UnknownNodesError as exc:
            raise ApiError(
                400, "UnknownNodes", f"nodes: {exc}; the cluster has no node of that name"
            ) from None
        except PreparationError as exc:
            raise ApiError(422, "InvalidAnnotations", str(exc)) from None
        return json_response(body)

    async def allocation(self, request: web.Request) -> web.StreamResponse:
        allocator = self.backend.allocator()
        ready = allocator is not None
        if allocator is None:
            allocator = Allocator(isolation_policy=self.backend.isolation_policy())
        body = allocation_view(
            allocator,
            ready=ready,
            generated_at=self.clock(),
            max_worker_per_node=self.backend.max_worker_per_node(),
            node=_query(request, "node"),
            pool=_query(request, "pool"),
            namespace=_query(request, "namespace"),
        )
        return json_response(body)

    async def pools(self, request: web.Request) -> web.StreamResponse:
        return json_response(pools_view(self._allocator()))

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        return json_response(nodes_view(self._allocator(), pool=_query(request, "pool")))

    async def alerts(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.backend.alerts_status())

    async def config(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.backend.config_status())

    async def assign_index(self, request: web.Request) -> web.StreamResponse:
        await require_controller_service_account(request, self.backend)
        pod = _query(request, "podName")
        if pod is None:
            raise ApiError(400, "InvalidQuery", "podName: required (the pod being admitted)")
        preview = _flag(request, "preview", default=False)
        index = self.backend.take_pod_index(preview)
        _log.info("%s pod index %d to pod %s", "previewed" if preview else "assigned", index,
                  pod)  # fmt: skip
        return web.Response(text=str(index), content_type="text/plain")


def _error_middleware() -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = _HTTP_CODES.get(exc.status, exc.reason.replace(" ", ""))
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            message = exc.text if exc.text and exc.text != f"{exc.status}: {exc.reason}" else (
                f"{request.method} {request.path}: {exc.reason.lower()}"
            )  # fmt: skip
            return error_response(exc.status, code, message, headers)
        except Exception as exc:
            _log.exception("%s %s failed", request.method, request.path)
            return error_response(500, "InternalError", f"{type(exc).__name__}: {exc}")

    return errors


def _forward_middleware(
    backend: ApiBackend, forwarder: LeaderForwarder, prefixes: Sequence[str]
) -> Middleware:
    @web.middleware
    async def forward(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if (
            path not in LOCAL_PATHS
            and any(path.startswith(prefix) for prefix in prefixes)
            and not backend.is_leader()
        ):
            return await forwarder.forward(request)
        return await handler(request)

    return forward


def create_api_app(
    backend: ApiBackend,
    *,
    forward_prefixes: Sequence[str] = (API_PREFIX,),
    forward_timeout: float = 10.0,
    max_body: int = MAX_FORWARDED_BODY,
    clock: Callable[[], float] = time.time,
) -> web.Application:
    """The `/api/*` application. A follower forwards requests whose path starts with one of
    `forward_prefixes` (except alerts and config) to the leader, waiting `forward_timeout`
    seconds at most; `max_body` bounds the bodies aiohttp reads (413 beyond); `clock` gives
    `generatedAt` (seconds since the epoch)."""
    forwarder = LeaderForwarder(backend.leader_address, forward_timeout)
    app = web.Application(
        client_max_size=max_body,
        middlewares=[
            _error_middleware(),
            _forward_middleware(backend, forwarder, tuple(forward_prefixes)),
        ],
    )

    async def close_forwarder(_: web.Application) -> None:
        await forwarder.close()

    app.on_cleanup.append(close_forwarder)
    handlers = _Handlers(backend, clock)
    app.router.add_post(SIMULATE_SCHEDULE_PATH, handlers.simulate)
    app.router.add_get(ALLOCATION_PATH, handlers.allocation)
    app.router.add_get(POOLS_PATH, handlers.pools)
    app.router.add_get(NODES_PATH, handlers.nodes)
    app.router.add_get(ALERTS_PATH, handlers.alerts)
    app.router.add_get(CONFIG_PATH, handlers.config)
    app.router.add_get(ASSIGN_INDEX_PATH, handlers.assign_index)
    return app
