"""The controller's HTTP servers: the API on 8080 (`/api/*`, scheduling.md §16), the health
probes (`/healthz`, `/readyz`), Prometheus `/metrics` (deployment.md §3.1), and the embedded
metrics store's write path on the API port (metrics.md §9.3, `add_metrics_write_route`).

The app layer implements `ApiBackend` and `HealthBackend`, builds the applications with
`create_api_app`, `create_health_app` and `create_metrics_app`, and starts each with `serve`
on the address of its flag (`parse_bind_address`; "0" turns a listener off).
"""

from tensorfusion.api_server.api_app import (
    ALERTS_PATH,
    ALLOCATION_PATH,
    API_PREFIX,
    ASSIGN_INDEX_PATH,
    CONFIG_PATH,
    NODES_PATH,
    POOLS_PATH,
    SIMULATE_SCHEDULE_PATH,
    WORKLOADS_PATH,
    create_api_app,
)
from tensorfusion.api_server.backend import (
    ApiBackend,
    HealthBackend,
    SimulationInputs,
    TokenReviewResult,
    service_account_username,
)
from tensorfusion.api_server.forwarding import FORWARDED_HEADER
from tensorfusion.api_server.health_app import HEALTHZ_PATH, READYZ_PATH, create_health_app
from tensorfusion.api_server.metrics_app import METRICS_PATH, create_metrics_app
from tensorfusion.api_server.metrics_write import (
    METRICS_WRITE_PATH,
    METRICS_WRITE_PREFIX,
    MetricsSink,
    add_metrics_write_route,
)
from tensorfusion.runtime.http_server import (
    BindAddress,
    RunningServer,
    join_host_port,
    parse_bind_address,
    parse_host_port,
    serve,
)

__all__ = [
    "ALERTS_PATH",
    "ALLOCATION_PATH",
    "API_PREFIX",
    "ASSIGN_INDEX_PATH",
    "CONFIG_PATH",
    "FORWARDED_HEADER",
    "HEALTHZ_PATH",
    "METRICS_PATH",
    "METRICS_WRITE_PATH",
    "METRICS_WRITE_PREFIX",
    "NODES_PATH",
    "POOLS_PATH",
    "READYZ_PATH",
    "SIMULATE_SCHEDULE_PATH",
    "WORKLOADS_PATH",
    "ApiBackend",
    "BindAddress",
    "HealthBackend",
    "MetricsSink",
    "RunningServer",
    "SimulationInputs",
    "TokenReviewResult",
    "add_metrics_write_route",
    "create_api_app",
    "create_health_app",
    "create_metrics_app",
    "join_host_port",
    "parse_bind_address",
    "parse_host_port",
    "serve",
    "service_account_username",
]
