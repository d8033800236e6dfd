"""The controller's environment as the chart sets it (deployment.md §3.1, §3.3).

The caller passes the process environment as a mapping; nothing here reads it. A bad value is
one `EnvironmentError_` naming the variable, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.settings.environment_values import (
    SERVICE_ACCOUNT_TOKEN_FILE,
    EnvironmentValueError,
    env_bool,
    env_isolation_policy,
    env_port,
)
from tensorfusion.domain.vocabulary import IsolationPolicy

__all__ = ["ControllerEnvironment", "EnvironmentValueError", "TsdbEnvironment"]

DEFAULT_GPU_NODE_SELECTOR: Final = "nvidia.com/gpu.present=true"
DEFAULT_NAMESPACE: Final = "tensor-fusion-sys"
DEFAULT_RELEASE: Final = "tensor-fusion"
DEFAULT_HYPERVISOR_SERVICE_ACCOUNT: Final = "tensor-fusion-hypervisor-sa"
DEFAULT_WEBHOOK_SECRET: Final = "tensor-fusion-webhook-secret"
DEFAULT_API_HOST: Final = "127.0.0.1"


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
    host_aliases_file: str = ""
    """`HOST_ALIASES_FILE`: a hosts-format file consulted before DNS for the Alertmanager
    replicas behind the headless Service, for controllers run outside a cluster (`dev up`, the
    chart walkthrough); empty in a cluster."""
    """`WEBHOOK_CERT_EXTRA_HOSTS` (comma list): names or IPs added to a certificate the
    controller issues, besides the webhook Service's; a test setting (127.0.0.1)."""
    embedded_store_dir: str = "/var/lib/tensor-fusion/tsdb"
    """`TSDB_EMBEDDED_DIR`: where the leader's embedded DuckDB store keeps its file (the
    chart's emptyDir); out of a pod, any writable directory of this replica's own."""
    tsdb: TsdbEnvironment = TsdbEnvironment()

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> ControllerEnvironment:
        """Read the controller's variables from an environment mapping."""
        policy = env_isolation_policy(env, "TF_ISOLATION_MODE_POLICY")
        tsdb = TsdbEnvironment(
            mysql_host=env.get("TSDB_MYSQL_HOST", "").strip(),
            mysql_port=env_port(env, "TSDB_MYSQL_PORT", 4002),
            http_port=env_port(env, "TSDB_HTTP_PORT", 4000),
            database=env.get("TSDB_MYSQL_DATABASE", "").strip() or "public",
            is_cloud=env_bool(env, "TSDB_IS_CLOUD", False),
            user=env.get("TSDB_MYSQL_USER", ""),
            password=env.get("TSDB_MYSQL_PASSWORD", ""),
            rule_user=env.get("TSDB_RULE_USER", "").strip(),
            rule_password=env.get("TSDB_RULE_PASSWORD", ""),
            password_secret=env.get("TSDB_PASSWORD_SECRET_NAME", "").strip(),
            password_secret_key=env.get("TSDB_PASSWORD_SECRET_KEY", "").strip() or "password",
        )
        return cls(
            release_fullname=env.get("TF_RELEASE_FULLNAME", "").strip() or DEFAULT_RELEASE,
            pod_name=env.get("POD_NAME", "").strip(),
            pod_ip=env.get("POD_IP", "").strip(),
            namespace=env.get("OPERATOR_NAMESPACE", "").strip() or DEFAULT_NAMESPACE,
            isolation_policy=policy,
            gpu_node_selector=env.get("INITIAL_GPU_NODE_LABEL_SELECTOR", "").strip()
            or DEFAULT_GPU_NODE_SELECTOR,
            progressive_migration=env_bool(env, "NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION", False),
            enable_webhooks=env_bool(env, "ENABLE_WEBHOOKS", True),
            enable_scheduler=env_bool(env, "ENABLE_SCHEDULER", True),
            enable_cr_controller=env_bool(env, "ENABLE_CR_CONTROLLER", True),
            api_port=env_port(env, "PORT", 8080),
            api_host=env.get("API_BIND_HOST", DEFAULT_API_HOST).strip(),
            peer_port=env_port(env, "PEER_PORT", 9444),
            peer_host=env.get("PEER_BIND_HOST", "").strip(),
            peer_token_file=env.get("PEER_TOKEN_FILE", "").strip() or SERVICE_ACCOUNT_TOKEN_FILE,
            service_account=env.get("SERVICE_ACCOUNT_NAME", "").strip()
            or env.get("TF_RELEASE_FULLNAME", "").strip()
            or DEFAULT_RELEASE,
            hypervisor_service_account=env.get("HYPERVISOR_SERVICE_ACCOUNT_NAME", "").strip()
            or DEFAULT_HYPERVISOR_SERVICE_ACCOUNT,
            webhook_port=env_port(env, "WEBHOOK_PORT", 9443),
            webhook_secret=env.get("WEBHOOK_SECRET_NAME", "").strip() or DEFAULT_WEBHOOK_SECRET,
            webhook_cert_extra_hosts=tuple(
                h.strip() for h in env.get("WEBHOOK_CERT_EXTRA_HOSTS", "").split(",") if h.strip()
            ),
            host_aliases_file=env.get("HOST_ALIASES_FILE", "").strip(),
            embedded_store_dir=env.get("TSDB_EMBEDDED_DIR", "").strip()
            or "/var/lib/tensor-fusion/tsdb",
            tsdb=tsdb,
        )
