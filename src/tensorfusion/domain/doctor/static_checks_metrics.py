"""Guide step 2, the metrics store: a GreptimeDB that survives, its credentials, the password."""

from __future__ import annotations

from typing import Final

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_context import ChartValues, describe, result, truthy

__all__ = [
    "DEFAULT_STANDALONE_HOST",
    "cloud_auth",
    "password_in_values",
    "standalone_in_production",
    "store",
]

DEFAULT_STANDALONE_HOST: Final = "greptimedb-standalone.greptimedb.svc.cluster.local"

CLOUD_SNIPPET: Final = """\
# Greptime Cloud; pass the password from your secret manager: --set greptime.password=...
greptime:
  installStandalone: false
  isCloud: true
  host: <instance>.<region>.aws.greptime.cloud
  port: 5001
  db: <database>
  user: <user>
"""
OPERATOR_SNIPPET: Final = """\
# a GreptimeDB Operator cluster (at least 3 datanodes), without authentication
greptime:
  installStandalone: false
  isCloud: false
  host: <greptimedb-frontend-service>.<namespace>.svc.cluster.local
  port: 4002
  db: public
"""
SECRET_FIX: Final = """\
# pass it from your secret manager instead of a committed file:
#   --set greptime.password="$(<your secret manager command>)"
# or name a Secret you created in the release namespace:
greptime:
  existingSecret: <secret-name>
  existingSecretKey: password
"""


def _standalone_hosts(chart: ChartValues) -> set[str]:
    default = chart.default("greptime.host")
    hosts = {DEFAULT_STANDALONE_HOST}
    if isinstance(default, str) and default.strip():
        hosts.add(default.strip())
    return hosts


def _where(chart: ChartValues) -> str:
    host = chart.get("greptime.host")
    port = chart.get("greptime.port")
    database = chart.get("greptime.db")
    mode = "Greptime Cloud" if truthy(chart.get("greptime.isCloud")) else "self-hosted"
    return f"{host}:{port} (database {database}, {mode})"


def store(chart: ChartValues) -> CheckResult:
    """`metrics.store`: a GreptimeDB to write to when the built-in one is off."""
    host = chart.get("greptime.host")
    if truthy(chart.get("greptime.installStandalone")):
        found = f"the chart installs a single-node GreptimeDB; the controller uses {host}"
        return result("metrics.store", Status.PASS, found)
    fix = CLOUD_SNIPPET + OPERATOR_SNIPPET
    prefix = "greptime.installStandalone is false and greptime.host"
    if host is None:
        return result("metrics.store", Status.FAIL, f"{prefix} is not set: no metrics store", fix)
    text = str(host).strip()
    if not text:
        found = (
            f"{prefix} is empty: the controller's embedded store keeps metrics in the leader "
            "pod only (one leader's data, lost on failover and on every restart)"
        )
        return result("metrics.store", Status.WARN, found, fix)
    if text in _standalone_hosts(chart):
        found = (
            f"{prefix} is still {text}, the built-in GreptimeDB that installStandalone: false "
            "removes: the controller has no metrics store (TimeSeriesDatabaseReady=False)"
        )
        return result("metrics.store", Status.FAIL, found, fix)
    return result("metrics.store", Status.PASS, f"GreptimeDB at {_where(chart)}")


def cloud_auth(chart: ChartValues) -> CheckResult:
    """`metrics.cloud-auth`: Greptime Cloud needs a user and a password (or a Secret)."""
    if not truthy(chart.get("greptime.isCloud")):
        return result("metrics.cloud-auth", Status.PASS, "greptime.isCloud is false")
    missing: list[str] = []
    if not truthy(chart.get("greptime.user")):
        missing.append("greptime.user")
    secret = chart.get("greptime.existingSecret")
    if not truthy(chart.get("greptime.password")) and not truthy(secret):
        missing.append("greptime.password (or greptime.existingSecret)")
    if missing:
        found = f"greptime.isCloud is true without {' and '.join(missing)}"
        if len(missing) > 1 or missing[0] != "greptime.user":
            found += ": helm refuses to render the chart"
        return result("metrics.cloud-auth", Status.FAIL, found, CLOUD_SNIPPET)
    password = f"Secret {secret}" if truthy(secret) else "greptime.password"
    user = describe(chart.get("greptime.user"))
    found = f"greptime.isCloud with user {user}, password from {password}"
    return result("metrics.cloud-auth", Status.PASS, found)


_PASSWORD_KEYS: Final = ("greptime.password", "greptime.ruleReader.password")


def password_in_values(chart: ChartValues) -> CheckResult:
    """`metrics.password-in-values`: GreptimeDB passwords (the writer's and the rule reader's)
    given with `--set`, not in a values file."""
    given = [key for key in _PASSWORD_KEYS if truthy(chart.get(key))]
    if not given:
        return result("metrics.password-in-values", Status.PASS, "no greptime.password in values")
    in_files: list[str] = []
    for key in given:
        source = chart.sources.get(key, "")
        if not source.startswith("--set"):
            where = "the chart's values.yaml" if source == "chart" else (source or "a values file")
            in_files.append(f"{key} is set in {where}")
    if not in_files:
        found = f"{' and '.join(given)} come from --set, not from a values file"
        return result("metrics.password-in-values", Status.PASS, found)
    found = f"{'; '.join(in_files)}: the password sits in a file (and in its history)"
    return result("metrics.password-in-values", Status.WARN, found, SECRET_FIX)


def standalone_in_production(chart: ChartValues) -> CheckResult:
    """`metrics.standalone-in-production`: no single-replica GreptimeDB under an HA controller."""
    if not truthy(chart.get("greptime.installStandalone")):
        return result("metrics.standalone-in-production", Status.PASS, "no built-in GreptimeDB")
    count = chart.replicas()
    if count is None or count >= 2:
        found = (
            "the built-in GreptimeDB is a single replica (one 20Gi volume) under "
            f"controller.replicaCount {describe(chart.get('controller.replicaCount'))}: "
            "metrics, alerts and dashboards depend on one pod"
        )
        return result("metrics.standalone-in-production", Status.WARN, found, OPERATOR_SNIPPET)
    found = "the built-in single-node GreptimeDB with one controller replica (a trial install)"
    return result("metrics.standalone-in-production", Status.PASS, found)
