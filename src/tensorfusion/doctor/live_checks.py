"""The live checks of doctor.md: what the cluster shows about the release, read only.

`live_checks(ctx)` runs every check of the spec's live table in the guide's order and returns
one `CheckResult` each, naming the `kubectl` command that shows the same; `live.test-alert`
(the only one that writes) runs only with `send_test_alert`. This module holds the checks on
CRDs and the tensor-fusion.ai objects; the checks on pods and the Lease are in `live_pods`,
the webhook check in `live_webhook`, the checks through the controller's API in
`live_controller_api`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from tensorfusion.adapters.kube.client import KubeClient, raw_http
from tensorfusion.doctor.live_context import (
    CONTROLLER_LABEL,
    DEFAULT_NAMESPACE,
    DEFAULT_RELEASE,
    CheckOutcome,
    LiveContext,
    condition,
    dig,
    name_of,
    parse_time,
    run_check,
)
from tensorfusion.doctor.live_controller_api import (
    check_simulate,
    check_test_alert,
    simulate_command,
    test_alert_command,
)
from tensorfusion.doctor.live_pods import (
    check_alertmanager_pods,
    check_controller_pods,
    check_leader,
)
from tensorfusion.doctor.live_webhook import check_webhook, webhook_command
from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.model import API_GROUP, KINDS
from tensorfusion.runtime.leader_election import LEASE_NAME

__all__ = ["HEARTBEAT_MAX_AGE_S", "live_checks", "mps_findings", "run_live_checks"]

HEARTBEAT_MAX_AGE_S: Final = 90.0
"""An agent heartbeat older than this is stale (api.md: `hypervisorState: Stale`)."""

_GROUP_PATH: Final = f"/apis/{API_GROUP}/v1"
_STORE_FIX: Final = """greptime:            # step 2: examples/production/greptime-*.yaml
  installStandalone: false
  host: <greptimedb host>
  port: 4002
then the controller's log: kubectl logs -n {ns} deploy/{release}-controller -c controller"""


# ---- verify: CRDs and the tensor-fusion.ai objects ----------------------------------------


def mps_findings(nodes: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(problems, others) of the nodes' MPS daemons (hypervisor.md, *GPU isolation*): Failed or
    Restarting refuses the node's new workers; Starting is only noted."""
    problems: list[str] = []
    others: list[str] = []
    for node in nodes:
        mps = dig(node, "status", "hypervisorStatus", "mps") or {}
        state = mps.get("state") if isinstance(mps, Mapping) else None
        message = f" ({mps.get('message')})" if isinstance(mps, Mapping) and mps.get(
            "message") else ""  # fmt: skip
        if state in ("Failed", "Restarting"):
            problems.append(f"GPUNode {name_of(node)}: MPS daemon {state}{message}, its new "
                            "workers are refused")  # fmt: skip
        elif state == "Starting":
            others.append(f"GPUNode {name_of(node)}: MPS daemon Starting")
    return problems, others


async def check_crds(ctx: LiveContext) -> CheckOutcome:
    """Every CRD of the chart installed, established and serving v1."""
    crds = await ctx.items("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    by_name = {name_of(crd): crd for crd in crds}
    problems = []
    for info in KINDS:
        crd = by_name.get(info.crd_name)
        if crd is None:
            problems.append(f"{info.crd_name} missing")
            continue
        if condition(crd, "Established").get("status") != "True":
            problems.append(f"{info.crd_name} not established")
        versions = dig(crd, "spec", "versions") or ()
        if not any(v.get("name") == "v1" and v.get("served") for v in versions):
            problems.append(f"{info.crd_name} does not serve v1")
    if problems:
        return CheckOutcome(
            Status.FAIL,
            "; ".join(problems),
            "kubectl apply --server-side -f charts/tensor-fusion/crds/   "
            "# helm installs CRDs on the first install only",
        )
    return CheckOutcome(
        Status.PASS, f"all {len(KINDS)} CRDs of {API_GROUP} installed and serving v1"
    )


async def _clusters(ctx: LiveContext) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await ctx.cached(
        "clusters", lambda: ctx.items(f"{_GROUP_PATH}/tensorfusionclusters")
    )
    return found


async def check_cluster_pools(ctx: LiveContext) -> CheckOutcome:
    """The TensorFusionCluster and every GPUPool in phase Running."""
    clusters = await _clusters(ctx)
    pools = await ctx.items(f"{_GROUP_PATH}/gpupools")
    if not clusters or not pools:
        missing = "TensorFusionCluster" if not clusters else "GPUPool"
        return CheckOutcome(
            Status.FAIL,
            f"no {missing}",
            "cluster:\n  enabled: true        # the chart's default cluster and pool",
        )
    objects = [("TensorFusionCluster", c) for c in clusters] + [("GPUPool", p) for p in pools]
    phases = [
        (kind, name_of(obj), dig(obj, "status", "phase") or "no phase") for kind, obj in objects
    ]
    listing = ", ".join(f"{kind} {name} {phase}" for kind, name, phase in phases)
    if any(phase != "Running" for _, _, phase in phases):
        return CheckOutcome(
            Status.FAIL,
            listing,
            "kubectl describe tensorfusioncluster,gpupool   "
            f"# and kubectl logs -n {ctx.namespace} deploy/{ctx.deployment_name} "
            "-c controller",
        )
    return CheckOutcome(Status.PASS, listing)


async def check_gpus(ctx: LiveContext) -> CheckOutcome:
    """GPUNodes and GPUs present, none Unknown, every node agent heartbeating."""
    nodes = await ctx.items(f"{_GROUP_PATH}/gpunodes")
    gpus = await ctx.items(f"{_GROUP_PATH}/gpus")
    if not nodes or not gpus:
        return CheckOutcome(
            Status.FAIL,
            f"{len(nodes)} GPUNodes, {len(gpus)} GPUs",
            "label the GPU nodes to match initialGpuNodeLabelSelector "
            "(nvidia.com/gpu.present=true) and check the hypervisor pods: "
            f"kubectl get pods -n {ctx.namespace} -l "
            "tensor-fusion.ai/component=hypervisor -o wide",
        )
    problems: list[str] = []
    others: list[str] = []
    for kind, obj in [("GPUNode", n) for n in nodes] + [("GPU", g) for g in gpus]:
        phase = dig(obj, "status", "phase") or "Pending"
        if phase == "Unknown":
            problems.append(f"{kind} {name_of(obj)} Unknown")
        elif phase != "Running":
            others.append(f"{kind} {name_of(obj)} {phase}")
    oldest = 0.0
    for node in nodes:
        beat = parse_time(dig(node, "status", "hypervisorStatus", "lastHeartbeatTime"))
        if beat is None:
            problems.append(f"GPUNode {name_of(node)}: no agent heartbeat")
            continue
        age = (ctx.clock() - beat).total_seconds()
        oldest = max(oldest, age)
        if age > HEARTBEAT_MAX_AGE_S:
            problems.append(f"GPUNode {name_of(node)}: agent heartbeat {age:.0f}s old")
    found, noted = mps_findings(nodes)
    problems += found
    others += noted
    counts = f"{len(nodes)} GPUNodes, {len(gpus)} GPUs"
    agents = (
        f"kubectl get pods -n {ctx.namespace} -l tensor-fusion.ai/component=hypervisor "
        "-o wide   # and the agent's log on that node"
    )
    if problems:
        return CheckOutcome(Status.FAIL, f"{counts}: {'; '.join(problems + others)}", agents)
    if others:
        return CheckOutcome(Status.WARN, f"{counts}: {'; '.join(others)}", agents)
    return CheckOutcome(
        Status.PASS, f"{counts}, all Running; agent heartbeats at most {oldest:.0f}s old"
    )


async def check_metrics_store(ctx: LiveContext) -> CheckOutcome:
    """`TimeSeriesDatabaseReady=True` on the TensorFusionCluster, with the error if not."""
    clusters = await _clusters(ctx)
    if not clusters:
        return CheckOutcome(Status.SKIP, "no TensorFusionCluster to carry TimeSeriesDatabaseReady")
    failing, fine = [], []
    for cluster in clusters:
        found = condition(cluster, "TimeSeriesDatabaseReady")
        if found.get("status") == "True":
            fine.append(f"{name_of(cluster)}: connected ({found.get('message') or 'ready'})")
        elif found:
            failing.append(
                f"{name_of(cluster)}: TimeSeriesDatabaseReady={found.get('status')} "
                f"{found.get('reason') or ''}: {found.get('message') or ''}"
            )
        else:
            failing.append(
                f"{name_of(cluster)}: no TimeSeriesDatabaseReady condition yet "
                "(the leader reports it)"
            )
    if failing:
        fix = _STORE_FIX.format(ns=ctx.namespace, release=ctx.release)
        return CheckOutcome(Status.FAIL, "; ".join(failing + fine), fix)
    return CheckOutcome(Status.PASS, "; ".join(fine))


# ---- the table ---------------------------------------------------------------------------

_Check = Callable[[LiveContext], Awaitable[CheckOutcome]]


def _table(ctx: LiveContext) -> list[tuple[str, str, str, _Check]]:
    ns = ctx.namespace
    tsdb = (
        "kubectl get tensorfusioncluster -o jsonpath='{range .items[*]}{.metadata.name}: "
        '{.status.conditions[?(@.type=="TimeSeriesDatabaseReady")]}{"\\n"}{end}\''
    )
    return [
        ("live.leader", "1", f"kubectl get lease {LEASE_NAME} -n {ns} -o yaml", check_leader),
        ("live.webhook", "5, more", webhook_command(ctx), check_webhook),
        ("live.simulate", "6", simulate_command(ctx), check_simulate),
        (
            "live.controller-pods",
            "verify",
            f"kubectl get pods -n {ns} -l {CONTROLLER_LABEL} -o wide",
            check_controller_pods,
        ),
        (
            "live.alertmanager-pods",
            "verify",
            f"kubectl get statefulset,pods -n {ns} -l app.kubernetes.io/component=alert-manager "
            "-o wide",
            check_alertmanager_pods,
        ),
        ("live.crds", "verify", f"kubectl api-resources --api-group={API_GROUP}", check_crds),
        (
            "live.cluster-pools",
            "verify",
            "kubectl get tensorfusioncluster,gpupool",
            check_cluster_pools,
        ),
        ("live.gpus", "verify", "kubectl get gpunode,gpu", check_gpus),
        ("live.metrics-store", "verify", tsdb, check_metrics_store),
    ]


async def live_checks(ctx: LiveContext, *, send_test_alert: bool = False) -> list[CheckResult]:
    """Every live check of doctor.md, in the guide's order; `live.test-alert` (which posts to
    the Alertmanagers) only with `send_test_alert`."""
    table = _table(ctx)
    if send_test_alert:
        table.insert(1, ("live.test-alert", "3", test_alert_command(ctx), check_test_alert))
    return [
        await run_check(check_id, step, command, functools.partial(check, ctx))
        for check_id, step, command, check in table
    ]


async def run_live_checks(
    client: KubeClient,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    release: str = DEFAULT_RELEASE,
    values: Mapping[str, Any] | None = None,
    send_test_alert: bool = False,
    api_url: str = "",
) -> list[CheckResult]:
    """`live_checks` over a lightkube client (its HTTP client, credentials and server):
    `values`, the merged values when the user gave some, are what the webhook check compares
    the installed configuration with; `api_url`, the controller's API reached directly (a
    port-forward) instead of through the API server's proxy."""
    ctx = LiveContext(raw_http(client), namespace, release, values, api_url=api_url)
    return await live_checks(ctx, send_test_alert=send_test_alert)
