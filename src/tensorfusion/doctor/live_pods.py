"""The live checks on the release's pods and its Lease (deployment.md §6, §8).

- `live.controller-pods`: at least 2 pods labelled `tensor-fusion.ai/component=operator`
  Running and Ready, on different nodes (the guide's verification, step 1's anti-affinity).
- `live.alertmanager-pods`: the StatefulSet's replicas Running and Ready (SKIP without it:
  `alert.enabled` false, an external Alertmanager).
- `live.leader`: the Lease held by one of the controller pods, renewed within its duration
  (WARN when that pod is not Ready). A holder killed a moment ago still passes until its
  last renewal is older than the lease duration: only then can another replica take over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tensorfusion.doctor.live_context import (
    CONTROLLER_LABEL,
    CheckOutcome,
    LiveContext,
    condition,
    dig,
    name_of,
    parse_time,
)
from tensorfusion.domain.doctor.results import Status
from tensorfusion.runtime.leader_election import LEASE_DURATION, LEASE_NAME

__all__ = ["check_alertmanager_pods", "check_controller_pods", "check_leader"]

_OVERLAY: Final = (
    "helm upgrade tensor-fusion-sys tensor-fusion -n tensor-fusion-sys "
    "-f values-production.yaml -f my-values.yaml"
)
_REQUIRED_ANTI_AFFINITY: Final = """controller:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchExpressions:
              - key: tensor-fusion.ai/component
                operator: In
                values: [operator]
          topologyKey: kubernetes.io/hostname"""


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [pod for pod in pods if not dig(pod, "metadata", "deletionTimestamp")]


def _ready(pod: Mapping[str, Any]) -> bool:
    running = dig(pod, "status", "phase") == "Running"
    return running and condition(pod, "Ready").get("status") == "True"


def _describe_pods(pods: Sequence[Mapping[str, Any]]) -> str:
    return (
        "; ".join(
            f"{name_of(pod)} {dig(pod, 'status', 'phase') or 'no phase'}"
            f"{' Ready' if _ready(pod) else ' not Ready'}"
            f" on {dig(pod, 'spec', 'nodeName') or 'no node'}"
            for pod in pods
        )
        or "none"
    )


# ---- verify: controller and Alertmanager pods ---------------------------------------------


async def check_controller_pods(ctx: LiveContext) -> CheckOutcome:
    """At least 2 controller pods Running and Ready, on different nodes."""
    deployment = await ctx.deployment()
    if deployment is None:
        return CheckOutcome(
            Status.FAIL,
            f"no Deployment {ctx.namespace}/{ctx.deployment_name}",
            "install the chart, or pass the --release and --namespace it uses",
        )
    wanted = int(dig(deployment, "spec", "replicas") or 1)
    pods = _live(await ctx.controller_pods())
    ready = [pod for pod in pods if _ready(pod)]
    nodes = {str(dig(pod, "spec", "nodeName")) for pod in ready if dig(pod, "spec", "nodeName")}
    listing = _describe_pods(pods)
    if len(ready) < 2:
        fix = (
            f"controller:\n  replicaCount: 2      # values-production.yaml; then {_OVERLAY}"
            if wanted < 2
            else f"kubectl describe pods -n {ctx.namespace} -l {CONTROLLER_LABEL}"
        )
        return CheckOutcome(
            Status.FAIL,
            f"{len(ready)} of {len(pods)} controller pods Running and "
            f"Ready (Deployment replicas {wanted}): {listing}",
            fix,
        )
    if len(nodes) < 2:
        return CheckOutcome(
            Status.FAIL,
            f"{len(ready)} controller pods Ready, all on node "
            f"{', '.join(sorted(nodes))}: one node failure stops both",
            _REQUIRED_ANTI_AFFINITY,
        )
    return CheckOutcome(
        Status.PASS, f"{len(ready)} Running and Ready on {len(nodes)} nodes: {listing}"
    )


async def check_alertmanager_pods(ctx: LiveContext) -> CheckOutcome:
    """The StatefulSet's replicas Running and Ready (SKIP when alert.enabled is false)."""
    path = f"/apis/apps/v1/namespaces/{ctx.namespace}/statefulsets/{ctx.alertmanager_name}"
    statefulset = await ctx.get(path)
    if statefulset is None:
        return CheckOutcome(
            Status.SKIP,
            f"no StatefulSet {ctx.namespace}/{ctx.alertmanager_name} "
            "(alert.enabled false: the controller sends to -alert-manager-addr)",
        )
    wanted = int(dig(statefulset, "spec", "replicas") or 0)
    labels = dig(statefulset, "spec", "selector", "matchLabels") or {}
    selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    pods = _live(await ctx.items(f"/api/v1/namespaces/{ctx.namespace}/pods", selector))
    ready = [pod for pod in pods if _ready(pod)]
    listing = _describe_pods(pods)
    if len(ready) < wanted or wanted == 0:
        return CheckOutcome(
            Status.FAIL,
            f"{len(ready)} of {wanted} Alertmanager pods Running and Ready: {listing}",
            f"kubectl describe pods -n {ctx.namespace} -l "
            f"{selector}   # alert.persistence needs a default StorageClass",
        )
    if wanted < 2:
        return CheckOutcome(
            Status.WARN,
            f"1 Alertmanager replica ({listing}): no gossip cluster, a "
            "restart loses its notification state",
            "alert:\n  replicaCount: 3      # values-production.yaml",
        )
    return CheckOutcome(Status.PASS, f"{len(ready)} of {wanted} Running and Ready: {listing}")


# ---- step 1: the Lease ----------------------------------------------------------------------


async def check_leader(ctx: LiveContext) -> CheckOutcome:
    """The Lease is held by a controller pod and was renewed within its duration."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ctx.namespace}/leases/{LEASE_NAME}"
    lease = await ctx.get(path)
    if lease is None:
        return CheckOutcome(
            Status.FAIL,
            f"no Lease {ctx.namespace}/{LEASE_NAME}: no replica ever led here",
            "keep -leader-elect in controller.command (the default "
            "command), and check that a controller runs",
        )
    holder = str(dig(lease, "spec", "holderIdentity") or "")
    duration = float(dig(lease, "spec", "leaseDurationSeconds") or LEASE_DURATION)
    renewed = parse_time(dig(lease, "spec", "renewTime"))
    by_name = {name_of(pod): pod for pod in _live(await ctx.controller_pods())}
    pods = list(by_name)
    if not holder:
        return CheckOutcome(
            Status.FAIL,
            "the Lease has no holder (released; no replica leads)",
            f"kubectl logs -n {ctx.namespace} deploy/{ctx.deployment_name} -c controller",
        )
    age = (ctx.clock() - renewed).total_seconds() if renewed else None
    since = f"renewed {age:.0f}s ago" if age is not None else "never renewed"
    if holder not in pods:
        return CheckOutcome(
            Status.FAIL,
            f"held by {holder}, which is not one of the controller "
            f"pods ({', '.join(pods) or 'none'}); {since}",
            f"wait {duration:.0f}s for a replica to take over, then run again",
        )
    if age is None or age > duration:
        return CheckOutcome(
            Status.FAIL,
            f"held by {holder} but {since} (lease {duration:.0f}s): the holder stopped renewing",
            f"kubectl logs -n {ctx.namespace} {holder} -c controller",
        )
    if not _ready(by_name[holder]):
        return CheckOutcome(
            Status.WARN,
            f"held by {holder}, {since} (lease {duration:.0f}s), but that pod is not Ready: "
            "it leads without serving the webhook",
            f"kubectl describe pod -n {ctx.namespace} {holder}",
        )
    return CheckOutcome(Status.PASS, f"held by {holder}, {since} (lease {duration:.0f}s)")
