"""Guide step 1, a highly available control plane: replicas, leader election, anti-affinity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_command import (
    command_snippet,
    read_command,
    repaired_command,
)
from tensorfusion.domain.doctor.static_checks_context import (
    CHART_NAME,
    ChartValues,
    describe,
    result,
)
from tensorfusion.domain.label_selector import (
    SelectorError,
    parse_selector,
    selector_matches,
)

__all__ = [
    "REQUIRED_ANTI_AFFINITY",
    "anti_affinity",
    "anti_affinity_labels",
    "controller_pod_labels",
    "leader_elect",
    "replicas",
]

_ANTI: Final = "controller.affinity.podAntiAffinity"
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
COMPONENT_LABEL: Final = "tensor-fusion.ai/component"

REPLICAS_FIX: Final = """\
# the production overlay: -f https://download.tensor-fusion.ai/values-production.yaml
# or, in my-values.yaml:
controller:
  replicaCount: 2
"""
REQUIRED_ANTI_AFFINITY: Final = """\
# my-values.yaml: never two controller replicas on one node
controller:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchExpressions:
              - key: tensor-fusion.ai/component
                operator: In
                values:
                  - operator
"""


def replicas(chart: ChartValues) -> CheckResult:
    """`ha.replicas`: at least two controller replicas."""
    count = chart.replicas()
    if count is None:
        found = f"controller.replicaCount is {describe(chart.get('controller.replicaCount'))}"
        return result("ha.replicas", Status.FAIL, f"{found}, not a whole number", REPLICAS_FIX)
    if count < 2:
        found = (
            f"controller.replicaCount is {count}: no standby controller takes over when it "
            "fails (admission, scheduling and alerting stop with it)"
        )
        return result("ha.replicas", Status.FAIL, found, REPLICAS_FIX)
    return result("ha.replicas", Status.PASS, f"controller.replicaCount is {count}")


def leader_elect(chart: ChartValues) -> CheckResult:
    """`ha.leader-elect`: `-leader-elect` in `controller.command` when replicas ≥ 2."""
    command = read_command(chart.get("controller.command"))
    group = command.group("leader-elect")
    count = chart.replicas()
    several = count is None or count >= 2
    fix = command_snippet(repaired_command(chart))
    if group is not None and group.error:
        return result("ha.leader-elect", Status.FAIL, group.error, fix)
    elected = group is not None and group.flags is not None and group.flags.leader_elect
    if elected:
        return result("ha.leader-elect", Status.PASS, "controller.command has -leader-elect")
    what = "controller.command lacks -leader-elect"
    if group is not None:
        what = f"controller.command turns leader election off ({' '.join(group.tokens)})"
    if several:
        count_text = describe(chart.get("controller.replicaCount"))
        found = (
            f"{what} with controller.replicaCount {count_text}: "
            "every replica acts as the leader (allocations, scheduling and alerts twice)"
        )
        return result("ha.leader-elect", Status.FAIL, found, fix)
    found = f"{what}; harmless with 1 replica, required once controller.replicaCount is 2 or more"
    return result("ha.leader-elect", Status.PASS, found)


def _anti_affinity_terms(chart: ChartValues, kind: str) -> list[Any]:
    anti = chart.get(_ANTI)
    terms = anti.get(kind) if isinstance(anti, Mapping) else None
    return terms if isinstance(terms, list) else []


def _topology_keys(terms: list[Any]) -> str:
    keys: list[str] = []
    for term in terms:
        body = term.get("podAffinityTerm", term) if isinstance(term, Mapping) else {}
        key = body.get("topologyKey") if isinstance(body, Mapping) else None
        keys.append(str(key) if key else "(no topologyKey)")
    return ", ".join(dict.fromkeys(keys))


def anti_affinity(chart: ChartValues) -> CheckResult:
    """`ha.anti-affinity`: required (not only preferred) pod anti-affinity."""
    required = _anti_affinity_terms(chart, _REQUIRED)
    if required:
        found = f"required pod anti-affinity on {_topology_keys(required)}"
        return result("ha.anti-affinity", Status.PASS, found)
    preferred = _anti_affinity_terms(chart, _PREFERRED)
    if preferred:
        found = (
            f"pod anti-affinity is only preferred (on {_topology_keys(preferred)}): the "
            "scheduler may still place both controller replicas on one node"
        )
    else:
        found = "no pod anti-affinity: both controller replicas may run on one node"
    return result("ha.anti-affinity", Status.WARN, found, REQUIRED_ANTI_AFFINITY)


def controller_pod_labels(chart: ChartValues) -> dict[str, str]:
    """The controller pod template's labels: the Deployment's selector plus the component."""
    override = chart.get("nameOverride")
    name = (str(override) if override else CHART_NAME)[:63]
    name = name.removesuffix("-")
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": chart.release,
        "app.kubernetes.io/component": "controller",
        COMPONENT_LABEL: "operator",
    }


def anti_affinity_labels(chart: ChartValues) -> CheckResult:
    """`ha.anti-affinity-labels`: each required term's selector matches the controller pods."""
    required = _anti_affinity_terms(chart, _REQUIRED)
    if not required:
        return result("ha.anti-affinity-labels", Status.PASS, "no required anti-affinity term")
    labels = controller_pod_labels(chart)
    shown = ", ".join(f"{key}={value}" for key, value in labels.items())
    problems: list[str] = []
    for index, term in enumerate(required):
        where = f"{_ANTI}.{_REQUIRED}[{index}]"
        if not isinstance(term, Mapping):
            problems.append(f"{where} is {describe(term)}, not a pod affinity term")
            continue
        raw = term.get("labelSelector")
        if raw is None:
            problems.append(f"{where} has no labelSelector, so it matches no pod")
            continue
        try:
            selector = parse_selector(raw, f"{where}.labelSelector")
        except SelectorError as error:
            problems.append(str(error))
            continue
        if not selector_matches(selector, labels):
            problems.append(
                f"{where}.labelSelector {describe(raw)} matches none of the controller pods "
                f"(labels {shown}): the replicas do not repel each other"
            )
    if problems:
        fix = (
            "# the controller pods carry tensor-fusion.ai/component=operator\n"
            + REQUIRED_ANTI_AFFINITY
        )
        return result("ha.anti-affinity-labels", Status.FAIL, "; ".join(problems), fix)
    found = f"{len(required)} required term(s) match the controller pods ({shown})"
    return result("ha.anti-affinity-labels", Status.PASS, found)
