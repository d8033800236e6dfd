"""What every static check reads (merged values, their sources, the chart's defaults) and the
small helpers they share: value lookup, Go-template truthiness, results, YAML fix snippets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.model.errors import describe_value

__all__ = [
    "CHART_NAME",
    "DEFAULT_RELEASE",
    "STEPS",
    "ChartValues",
    "describe",
    "lookup",
    "nested",
    "result",
    "to_yaml",
    "truthy",
]

CHART_NAME: Final = "tensor-fusion"
DEFAULT_RELEASE: Final = "tensor-fusion-sys"

STEPS: Final[Mapping[str, str]] = {
    "ha.replicas": "1",
    "ha.leader-elect": "1",
    "ha.anti-affinity": "1",
    "ha.anti-affinity-labels": "1",
    "metrics.store": "1, 2",
    "metrics.cloud-auth": "2",
    "metrics.password-in-values": "2",
    "metrics.standalone-in-production": "2",
    "alert.receiver-target": "3",
    "alert.external-addr": "3",
    "alert.command-flags": "3",
    "alert.builtin-rules": "3",
    "alert.rule-valid": "3",
    "versions.pinned": "4",
    "migration.replicas": "5",
    "migration.failure-policy": "5, more",
    "scheduler.config": "6",
    "rollout.workers-clients": "7",
    "rollout.batch": "7",
    "rollout.window": "7",
    "capacity.oversell": "8",
    "logging.level": "more",
}
"""Every static check of doctor.md, in the table's order, with its guide step."""


class _Dumper(yaml.SafeDumper):
    """YAML with list items indented under their key, as the guide writes values."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        del indentless
        super().increase_indent(flow, False)


@dataclass(frozen=True, slots=True)
class ChartValues:
    """The merged values and what the checks compare them with.

    `sources` maps a dotted key path (`greptime.password`) to where its value came from: "chart",
    a values file's name or "--set". `defaults` are the chart's own values.yaml; `app_version`
    its Chart.yaml appVersion (the tag of an image whose tag is empty); `release` the Helm
    release name (a label of the controller pods).
    """

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    defaults: Mapping[str, Any]
    app_version: str
    release: str = DEFAULT_RELEASE

    def get(self, path: str) -> Any:
        """The merged value at a dotted path, None when absent."""
        return lookup(self.values, path)

    def default(self, path: str) -> Any:
        """The chart's default at a dotted path, None when absent."""
        return lookup(self.defaults, path)

    def replicas(self) -> int | None:
        """`controller.replicaCount` as a whole number; None when it is not one."""
        count = self.get("controller.replicaCount")
        if isinstance(count, bool) or not isinstance(count, int):
            return None
        return count


def lookup(values: Any, path: str) -> Any:
    """The value at a dotted path (`controller.image.tag`), None when any part is absent."""
    node = values
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def truthy(value: Any) -> bool:
    """Truth as a Go template's `if` sees it: "false" is true, 0, "", {} and [] are false."""
    if value is None:
        return False
    if isinstance(value, bool | int | float | str | list | Mapping):
        return bool(value)
    return True


def describe(value: Any) -> str:
    """A value in a finding, as compact JSON."""
    return describe_value(value)


def result(check_id: str, status: Status, found: str, fix: str = "") -> CheckResult:
    """A check's outcome, with its guide step from `STEPS`."""
    return CheckResult(id=check_id, step=STEPS[check_id], status=status, found=found, fix=fix)


def nested(path: str, value: Any) -> dict[str, Any]:
    """`nested("a.b", 1)` → `{"a": {"b": 1}}`."""
    node: Any = value
    for key in reversed(path.split(".")):
        node = {key: node}
    result_map: dict[str, Any] = node
    return result_map


def to_yaml(data: Any) -> str:
    """A values snippet as YAML text, keys in the order given."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
