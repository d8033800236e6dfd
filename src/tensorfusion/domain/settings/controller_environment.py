"""The controller's environment as the chart sets it (deployment.md §3.1, §3.3).

The caller passes the process environment as a mapping; nothing here reads it. A bad value is
one `EnvironmentError_` naming the variable, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.settings.environment_values import (
    SERVICE_ACCOUNT_TOKEN_FILE,
    EnvironmentValueError,
)
from tensorfusion.domain.settings.variables import (
    Variable,
    read_boolean,
    read_isolation_policy,
    read_list,
    read_port,
    read_raw,
    read_text,
    read_text_or_empty,
    read_variables,
)
from tensorfusion.domain.vocabulary import IsolationPolicy

__all__ = [
    "CONTROLLER_VARIABLES",
    "ControllerEnvironment",
    "EnvironmentValueError",
    "TsdbEnvironment",
]

DEFAULT_GPU_NODE_SELECTOR: Final = "nvidia.com/gpu.present=true"
DEFAULT_NAMESPACE: Final = "tensor-fusion-sys"
DEFAULT_RELEASE: Final = "tensor-fusion"
DEFAULT_HYPERVISOR_SERVICE_ACCOUNT: Final = "tensor-fusion-hypervisor-sa"
DEFAULT_WEBHOOK_SECRET: Final = "tensor-fusion-webhook-secret"
DEFAULT_API_HOST: Final = "127.0.0.1"


def _service_account(env: Mapping[str, str], name: str, default: Any) -> Any:
    """`SERVICE_ACCOUNT_NAME`, else `TF_RELEASE_FULLNAME`, else the default."""
    return read_text(env, name, "") or read_text(env, "TF_RELEASE_FULLNAME", default)


CONTROLLER_VARIABLES: Final[tuple[Variable, ...]] = (
    Variable("TF_RELEASE_FULLNAME", "release_fullname", "name",
             "The Helm release's full name (object names, the seal Secret)."),
    Variable("POD_NAME", "pod_name", "name", "This replica's pod (its Lease identity)."),
    Variable("POD_IP", "pod_ip", "ip", "This replica's pod IP (peers reach it there)."),
    Variable("OPERATOR_NAMESPACE", "namespace", "name", "The controller's namespace."),
    Variable("TF_ISOLATION_MODE_POLICY", "isolation_policy", "static|dynamic",
             "Whether a pool's isolation mode is fixed or may change.", read_isolation_policy),
    Variable("INITIAL_GPU_NODE_LABEL_SELECTOR", "gpu_node_selector", "selector",
             "The label selector of the Nodes that get a GPUNode."),
    Variable("NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION", "progressive_migration", "bool",
             "Taint and migrate GPU nodes from the NVIDIA device plugin progressively.",
             read_boolean),
    Variable("ENABLE_WEBHOOKS", "enable_webhooks", "bool", "Serve the pod admission webhook.",
             read_boolean),
    Variable("ENABLE_SCHEDULER", "enable_scheduler", "bool",
             "Run the scheduler extender and the leader's kube-scheduler.", read_boolean),
    Variable("ENABLE_CR_CONTROLLER", "enable_cr_controller", "bool",
             "Accepted (the chart sets it); the reconcilers always run on the leader.",
             read_boolean),
    Variable("PORT", "api_port", "port", "The public API's port.", read_port),
    Variable("API_BIND_HOST", "api_host", "host",
             "The public API's address; set and empty for every interface.", read_text_or_empty),
    Variable("PEER_PORT", "peer_port", "port",
             "The HTTPS port peers call (forwards to the leader, agents' metric writes).",
             read_port),
    Variable("PEER_BIND_HOST", "peer_host", "host",
             "The address of the peer port and the webhook; empty for every interface."),
    Variable("PEER_TOKEN_FILE", "peer_token_file", "path",
             "This replica's ServiceAccount token, sent to peers."),
    Variable("SERVICE_ACCOUNT_NAME", "service_account", "name",
             "The controller's own ServiceAccount (the only caller of state-changing /api/*).",
             _service_account, default_text='TF_RELEASE_FULLNAME\'s value ("tensor-fusion")'),
    Variable("HYPERVISOR_SERVICE_ACCOUNT_NAME", "hypervisor_service_account", "name",
             "The node agents' ServiceAccount (may write to the embedded metrics store)."),
    Variable("WEBHOOK_PORT", "webhook_port", "port", "The pod webhook's HTTPS port.", read_port),
    Variable("WEBHOOK_SECRET_NAME", "webhook_secret", "name",
             "The Secret holding the webhook certificate."),
    Variable("WEBHOOK_CERT_EXTRA_HOSTS", "webhook_cert_extra_hosts", "list",
             "Names or IPs added to the certificates the controller issues (tests).", read_list),
    Variable("HOST_ALIASES_FILE", "host_aliases_file", "path",
             "A hosts file consulted before DNS for the Alertmanagers, out of a cluster."),
    Variable("TSDB_EMBEDDED_DIR", "embedded_store_dir", "path",
             "The directory of the leader's embedded DuckDB metrics store."),
    Variable("TSDB_MYSQL_HOST", "tsdb.mysql_host", "host",
             "GreptimeDB's host; empty: the embedded store."),
    Variable("TSDB_MYSQL_PORT", "tsdb.mysql_port", "port", "GreptimeDB's MySQL port.", read_port),
    Variable("TSDB_HTTP_PORT", "tsdb.http_port", "port", "GreptimeDB's HTTP port.", read_port),
    Variable("TSDB_MYSQL_DATABASE", "tsdb.database", "name", "The metrics database."),
    Variable("TSDB_IS_CLOUD", "tsdb.is_cloud", "bool", "GreptimeDB is GreptimeCloud.",
             read_boolean),
    Variable("TSDB_MYSQL_USER", "tsdb.user", "name", "GreptimeDB's user.", read_raw),
    Variable("TSDB_MYSQL_PASSWORD", "tsdb.password", "secret", "GreptimeDB's password.",
             read_raw),
    Variable("TSDB_RULE_USER", "tsdb.rule_user", "name",
             "The read-only user of alert rule queries; empty: TSDB_MYSQL_USER."),
    Variable("TSDB_RULE_PASSWORD", "tsdb.rule_password", "secret", "Its password.", read_raw),
    Variable("TSDB_PASSWORD_SECRET_NAME", "tsdb.password_secret", "name",
             "The Secret of the cloud password, referenced by agent pods.",
             default_text='"" (<TF_RELEASE_FULLNAME>-greptimedb-secret)'),
    Variable("TSDB_PASSWORD_SECRET_KEY", "tsdb.password_secret_key", "key", "Its key."),
)  # fmt: skip
"""Every variable of the controller, in the order they are read."""


@dataclass(frozen=True, slots=True)
class TsdbEnvironment:
    """`TSDB_*`: where GreptimeDB is; no host means the embedded store."""

    mysql_host: str = ""
    mysql_port: int = 4002
    http_port: int = 4000
    database: str = "public"
    is_cloud: bool = False
    user: str = ""
    password: str = field(default="", repr=False)
    rule_user: str = ""
    """`TSDB_RULE_USER`: the user alert rule queries log in as (read-only), with
    `TSDB_RULE_PASSWORD`; either empty: rule queries use `TSDB_MYSQL_USER`'s credentials."""
    rule_password: str = field(default="", repr=False)
    password_secret: str = ""
    """`TSDB_PASSWORD_SECRET_NAME`: the Secret of the cloud password, which hypervisor pods
    reference (default `<TF_RELEASE_FULLNAME>-greptimedb-secret`, the chart's)."""
    password_secret_key: str = "password"
    """`TSDB_PASSWORD_SECRET_KEY`: its key."""

    @property
    def greptime(self) -> bool:
        """Whether GreptimeDB is configured (else the embedded DuckDB store)."""
        return bool(self.mysql_host)


@dataclass(frozen=True, slots=True)
class ControllerEnvironment:
    """The variables the chart gives the controller, with their defaults out of a pod."""

    release_fullname: str = DEFAULT_RELEASE
    pod_name: str = ""
    pod_ip: str = ""
    namespace: str = DEFAULT_NAMESPACE
    isolation_policy: IsolationPolicy = IsolationPolicy.STATIC
    gpu_node_selector: str = DEFAULT_GPU_NODE_SELECTOR
    progressive_migration: bool = False
    enable_webhooks: bool = True
    enable_scheduler: bool = True
    enable_cr_controller: bool = True
    api_port: int = 8080
    api_host: str = DEFAULT_API_HOST
    """`API_BIND_HOST`: the address the public API listens on: loopback by default (`kubectl
    port-forward` reaches it; nothing else in the cluster does); empty for every interface.
    Replicas sharing one host (tests, `dev up`) each take a loopback address, which is also
    their `POD_IP`."""
    peer_port: int = 9444
    """`PEER_PORT`: the HTTPS port peers call (followers forwarding to the leader, pod
    indices, the agents' metric writes), authenticated and authorized (security.md)."""
    peer_host: str = ""
    """`PEER_BIND_HOST`: the address the peer port and the webhook listen on (every interface
    by default)."""
    peer_token_file: str = SERVICE_ACCOUNT_TOKEN_FILE
    """`PEER_TOKEN_FILE`: this replica's ServiceAccount token, sent to peers (never over plain
    HTTP)."""
    service_account: str = DEFAULT_RELEASE
    """The controller's own ServiceAccount (the only caller of state-changing `/api/*`)."""
    hypervisor_service_account: str = DEFAULT_HYPERVISOR_SERVICE_ACCOUNT
    """`HYPERVISOR_SERVICE_ACCOUNT_NAME`: the node agents' ServiceAccount, whose tokens may
    write to the embedded metrics store (with the controller's own)."""
    webhook_port: int = 9443
    """`WEBHOOK_PORT`: the HTTPS port of the pod webhook (on `PEER_BIND_HOST` when set)."""
    webhook_secret: str = DEFAULT_WEBHOOK_SECRET
    """`WEBHOOK_SECRET_NAME`: the Secret holding the webhook certificate
    (`controller.admissionWebhooks.secretName`)."""
    webhook_cert_extra_hosts: tuple[str, ...] = ()
    """`WEBHOOK_CERT_EXTRA_HOSTS` (comma list): names or IPs added to a certificate the
    controller issues, besides the webhook Service's; a test setting (127.0.0.1)."""
    host_aliases_file: str = ""
    """`HOST_ALIASES_FILE`: a hosts-format file consulted before DNS for the Alertmanager
    replicas behind the headless Service, for controllers run outside a cluster (`dev up`, the
    chart walkthrough); empty in a cluster."""
    embedded_store_dir: str = "/var/lib/tensor-fusion/tsdb"
    """`TSDB_EMBEDDED_DIR`: where the leader's embedded DuckDB store keeps its file (the
    chart's emptyDir); out of a pod, any writable directory of this replica's own."""
    tsdb: TsdbEnvironment = TsdbEnvironment()

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> ControllerEnvironment:
        """Read the controller's variables (`CONTROLLER_VARIABLES`) from an environment mapping."""
        values, _ = read_variables(CONTROLLER_VARIABLES, env, cls())
        tsdb = {k.removeprefix("tsdb."): v for k, v in values.items() if k.startswith("tsdb.")}
        top = {k: v for k, v in values.items() if not k.startswith("tsdb.")}
        return cls(**top, tsdb=TsdbEnvironment(**tsdb))
