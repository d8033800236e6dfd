"""The controller's HTTP API (scheduling.md §16): on port 8080 (loopback by default) and, for
peers, on the authenticated HTTPS peer port.

`create_api_app(backend)` returns the aiohttp application; the app layer may add routes (the
embedded store's write path) before serving it, and names the path prefixes a follower forwards
to the leader (`forward_prefixes`). Every `/api/*` request but `GET /api/alerts` and
`GET /api/config` is answered by the leader: a follower forwards it to the leader's peer port
(`forwarding.py`). With `authenticate_callers` (the peer port) every request is authenticated
and authorized first (`peer_auth.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.api_server.auth import require_controller_service_account
from tensorfusion.api_server.backend import ApiBackend
from tensorfusion.api_server.console import add_console_routes
from tensorfusion.api_server.forwarding import LeaderForwarder
from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.api_server.peer_auth import peer_auth_middleware
from tensorfusion.api_server.pod_body import parse_pod, read_pod_body
from tensorfusion.api_server.responses import ApiError, error_response, json_response
from tensorfusion.domain.admission.dry_run import PreparationError, not_a_gpu_worker
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.snapshot import allocation_view, nodes_view, pools_view
from tensorfusion.domain.autoscaling.status_view import scaling_views
from tensorfusion.domain.simulate_schedule import UnknownNodesError, simulate_schedule
from tensorfusion.domain.workloads_view import workloads_view
from tensorfusion.runtime import web
from tensorfusion.runtime.web import Handler, Middleware

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
    "WORKLOADS_PATH",
    "create_api_app",
]

_log = logging.getLogger(__name__)

API_PREFIX: Final = "/api/"
SIMULATE_SCHEDULE_PATH: Final = "/api/simulate-schedule"
ALLOCATION_PATH: Final = "/api/allocation"
POOLS_PATH: Final = "/api/pools"
NODES_PATH: Final = "/api/nodes"
WORKLOADS_PATH: Final = "/api/workloads"
ALERTS_PATH: Final = "/api/alerts"
CONFIG_PATH: Final = "/api/config"
ASSIGN_INDEX_PATH: Final = "/api/assign-index"
LOCAL_PATHS: Final = frozenset({ALERTS_PATH, CONFIG_PATH})
"""Answered by the replica that receives them, never forwarded (alerting.md §9)."""

MAX_FORWARDED_BODY: Final = 8 * 1024 * 1024
"""Bytes a follower reads to forward (the store's write path takes 8 MiB); more is 413."""

MAX_ERROR_TEXT: Final = 500
"""Characters of an unexpected error's text in the log line and the 500 body."""
SIMULATION_THREADS: Final = 1
"""`POST /api/simulate-schedule` calls parsing or simulating at once; more get 429. One: with
the GIL a second thread adds no throughput and takes more CPU from the loop."""
INLINE_BODY_BYTES: Final = 64 * 1024
"""A smaller body is parsed on the loop (a few ms under the document limits); a larger one in
the offload thread."""

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
    def __init__(
        self, backend: ApiBackend, clock: Callable[[], float], offload: BoundedOffload
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.offload = offload

    def _allocator(self) -> Allocator:
        allocator = self.backend.allocator()
        if allocator is None:
            raise _allocator_not_ready()
        return allocator

    async def simulate(self, request: web.Request) -> web.StreamResponse:
        mutate = _flag(request, "mutate", default=True)
        nodes = _node_names(request)
        data = await read_pod_body(request)
        content_type = request.content_type
        if len(data) <= INLINE_BODY_BYTES:
            manifest = parse_pod(data, content_type)
        else:
            manifest = await self.offload.run(lambda: parse_pod(data, content_type))
        problem = not_a_gpu_worker(manifest)
        if problem is not None:
            raise ApiError(400, "NotAGPUWorker", problem)
        # Refused before the inputs are copied on the loop; no await until `run` takes the slot.
        self.offload.refuse_if_full()
        inputs = self.backend.simulation_inputs()
        if inputs is None:
            raise _allocator_not_ready()

        def simulate() -> dict[str, Any]:
            return simulate_schedule(
                manifest, inputs.preparer(), inputs.native, inputs.allocator,
                profile=inputs.profile, nodes=nodes, mutate=mutate,
            )  # fmt: skip

        try:
            body = await self.offload.run(simulate)
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
            scaling=scaling_views(self.backend.workload_objects()) if ready else None,
        )
        return json_response(body)

    async def workloads(self, request: web.Request) -> web.StreamResponse:
        usage, error = await self.backend.recent_usage()
        body = workloads_view(self.backend.workload_objects(), self.backend.allocator(),
                              usage=usage, usage_error=error,
                              namespace=_query(request, "namespace"))  # fmt: skip
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


def _one_line(exc: BaseException) -> str:
    """`Type: message`, on one line and at most `MAX_ERROR_TEXT` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MAX_ERROR_TEXT else f"{text[: MAX_ERROR_TEXT - 1]}…"


def _innermost_frame(exc: BaseException) -> str:
    """`file:line in function` where `exc` was raised (the traceback's last frame)."""
    tb = exc.__traceback__
    if tb is None:
        return "unknown place"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"


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
            # One line with the type: a body can make a traceback of any size (a deep one).
            _log.error("%s %s failed: %s (raised at %s)", request.method, request.path,
                       _one_line(exc), _innermost_frame(exc))  # fmt: skip
            return error_response(500, "InternalError", _one_line(exc))

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
    peer: PeerClient | None = None,
    authenticate_callers: bool = False,
    forward_prefixes: Sequence[str] = (API_PREFIX,),
    forward_timeout: float = 10.0,
    max_body: int = MAX_FORWARDED_BODY,
    clock: Callable[[], float] = time.time,
    offload: BoundedOffload | None = None,
    shed: Callable[[], str | None] | None = None,
    console: bool = False,
) -> web.Application:
    """The `/api/*` application. A follower forwards requests whose path starts with one of
    `forward_prefixes` (except alerts and config) to the leader's peer port through `peer`
    (503 without one), waiting `forward_timeout` seconds at most; `authenticate_callers`
    gates every request by TokenReview and SubjectAccessReview (the peer port); `max_body`
    bounds the bodies aiohttp reads (413 beyond); `clock` gives `generatedAt` (seconds since
    the epoch); `offload` runs the simulation's body parsing and simulation off the loop
    (default: `SIMULATION_THREADS` threads, 429 beyond, and while `shed()` gives a reason);
    `console` adds the web console's routes (`/console/`)."""
    forwarder = LeaderForwarder(backend.leader_address, peer, forward_timeout)
    gate = [peer_auth_middleware(backend)] if authenticate_callers else []
    app = web.Application(
        client_max_size=max_body,
        middlewares=[
            _error_middleware(),
            *gate,
            _forward_middleware(backend, forwarder, tuple(forward_prefixes)),
        ],
    )

    async def close_forwarder(_: web.Application) -> None:
        await forwarder.close()

    work = offload or BoundedOffload(name="simulate-schedule", limit=SIMULATION_THREADS, shed=shed)

    async def close_work(_: web.Application) -> None:
        work.close()

    app.on_cleanup.append(close_forwarder)
    if offload is None:  # a caller's offload is the caller's to close
        app.on_cleanup.append(close_work)
    handlers = _Handlers(backend, clock, work)
    app.router.add_post(SIMULATE_SCHEDULE_PATH, handlers.simulate)
    app.router.add_get(ALLOCATION_PATH, handlers.allocation)
    app.router.add_get(POOLS_PATH, handlers.pools)
    app.router.add_get(WORKLOADS_PATH, handlers.workloads)
    app.router.add_get(NODES_PATH, handlers.nodes)
    app.router.add_get(ALERTS_PATH, handlers.alerts)
    app.router.add_get(CONFIG_PATH, handlers.config)
    app.router.add_get(ASSIGN_INDEX_PATH, handlers.assign_index)
    if console:
        add_console_routes(app)
    return app
