"""One node-agent pod `hypervisor-<node>` per GPUNode, kept by the leader (deployment.md §10).

The pod is rendered by `domain.desired_state.hypervisor_pods` and judged by
`.hypervisor_pod_decisions`; this shell reads the caches, creates and deletes pods through the
fence, records Events, and keeps per node what the rollout of §11 needs (`sync`): the rendered
hash, the pod's, whether the pod is out of sync. `select(names)` lets the rollout replace the
outdated pods of Running GPUNodes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pod_decisions import (
    DEFAULT_MAX_CRASH_COUNT,
    PodAction,
    decide_hypervisor_pod,
    node_ready,
)
from tensorfusion.domain.desired_state.hypervisor_pods import (
    HypervisorInputs,
    HypervisorPodSettings,
    HypervisorTemplateError,
    hardware_metadata_json,
    hypervisor_pod_name,
    middleware_image,
    pod_hash_of,
    render_hypervisor_pod,
    scheduling_config_json,
)
from tensorfusion.domain.object_views import (
    Obj,
    controller_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    status_of,
    uid_of,
)
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import InformerEvent

__all__ = ["CRASH_LOOP_RECREATE", "TEMPLATE_INVALID", "HypervisorPodReconciler", "PodSync"]

_log = logging.getLogger(__name__)

CRASH_LOOP_RECREATE: Final = "HypervisorCrashLoopRecreate"
TEMPLATE_INVALID: Final = "HypervisorPodTemplateInvalid"
_DEFAULT_VENDOR: Final = "NVIDIA"
CREATED_UNSEEN_S: Final = 30.0
"""How long a pod we created counts as existing while the cache has not shown it yet."""


@dataclass(frozen=True, slots=True)
class PodSync:
    """A node's agent pod against its rendered pod (for the rollout)."""

    pool: str
    desired_hash: str
    pod_hash: str | None
    """The current pod's hash; None without a (live) pod."""
    out_of_sync: bool
    """Kept with another hash (a Running GPUNode the rollout has not selected)."""

    @property
    def in_sync(self) -> bool:
        """The current pod is the rendered one."""
        return self.pod_hash == self.desired_hash


class HypervisorPodReconciler:
    """Agent pods for GPUNodes, keyed by GPUNode (= node) name.

    Wire `on_gpu_node`, `on_node`, `on_pod` (pods labelled `component=hypervisor` in the
    controller namespace), `on_pool`, `on_template` (SchedulingConfigTemplate) and
    `on_provider_config`; run `run()` on the leader. `wait_synced` (optional) is awaited before
    the first reconcile (the ProviderConfig cache, part of the rendered pod).
    """

    def __init__(
        self,
        *,
        gpu_nodes: ObjectCache,
        nodes: ObjectCache,
        pools: ObjectCache,
        hypervisor_pods: ObjectCache,
        templates: ObjectCache,
        provider_configs: ObjectCache,
        settings: HypervisorPodSettings,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        max_crash_count: Callable[[], int] = lambda: DEFAULT_MAX_CRASH_COUNT,
        metrics_extra_labels: Callable[[], Mapping[str, str]] = dict,
        wait_synced: Callable[[], Awaitable[None]] | None = None,
        workers: int = 2,
    ) -> None:
        self._gpu_nodes = gpu_nodes
        self._nodes = nodes
        self._pools = pools
        self._pods = hypervisor_pods
        self._templates = templates
        self._providers = provider_configs
        self._settings = settings
        self._max_crash_count = max_crash_count
        self._extra_labels = metrics_extra_labels
        self._wait_synced = wait_synced
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop(
            "hypervisor-pods", self.reconcile, workers=workers
        )
        self.sync: dict[str, PodSync] = {}
        """Per node, its pod against the rendered one (what the rollout reads)."""
        self.sync_listeners: list[Callable[[str], None]] = []
        """Called with the pool's name when a node's entry in `sync` changes."""
        self._selected: set[str] = set()
        self._template_errors: dict[str, str] = {}
        self._created: dict[str, float] = {}
        """Node -> when we created its pod, until the cache shows it (no second POST)."""

    # ---- handlers ---------------------------------------------------------------------------

    def on_gpu_node(self, event: InformerEvent) -> None:
        """A GPUNode changed: its pod, when its labels, phase, identity or deletion changed."""
        if event.changed(lambda o: (dict(labels_of(o)), status_of(o).get("phase"),
                                      uid_of(o), is_deleting(o))):  # fmt: skip
            self.loop.add(event.key.name)

    def on_node(self, event: InformerEvent) -> None:
        """A Node changed: its pod, when its labels, readiness, identity or deletion changed."""
        if event.changed(lambda o: (dict(labels_of(o)), node_ready(o), uid_of(o),
                                      is_deleting(o))):  # fmt: skip
            self.loop.add(event.key.name)

    def on_pod(self, event: InformerEvent) -> None:
        """An agent pod changed: its GPUNode (controller owner, else the pod's node)."""
        owner = controller_of(event.obj)
        node = owner.get("name") if owner and owner.get("kind") == "GPUNode" else None
        node = node or (event.obj.get("spec") or {}).get("nodeName")
        if node:
            self.loop.add(str(node))

    def on_pool(self, event: InformerEvent) -> None:
        """A GPUPool's spec changed: the pods of its GPUNodes."""
        if event.changed(lambda o: o.get("spec")):
            self._add_pools({event.key.name})

    def on_template(self, event: InformerEvent) -> None:
        """A SchedulingConfigTemplate's spec changed: the pods of the pools naming it."""
        if not event.changed(lambda o: o.get("spec")):
            return
        self._add_pools({
            name_of(pool) for pool in self._pools.list()
            if (pool.get("spec") or {}).get("schedulingConfigTemplate") == event.key.name
        })  # fmt: skip

    def on_provider_config(self, event: InformerEvent) -> None:
        """A ProviderConfig's spec changed: every pod (its hardware metadata is in their env)."""
        if event.changed(lambda o: o.get("spec")):
            for gpu_node in self._gpu_nodes.list():
                self.loop.add(name_of(gpu_node))

    def _add_pools(self, pools: set[str]) -> None:
        for gpu_node in self._gpu_nodes.list():
            if labels_of(gpu_node).get(KEYS.managed_by) in pools:
                self.loop.add(name_of(gpu_node))

    # ---- rollout ----------------------------------------------------------------------------

    def select(self, names: Iterable[str]) -> None:
        """Let the rollout replace these nodes' outdated pods, Running GPUNodes included (the
        selection ends once the node's pod is the rendered one)."""
        for name in names:
            self._selected.add(name)
            self.loop.add(name)

    @property
    def namespace(self) -> str:
        """Where the agent pods live (the controller's namespace)."""
        return self._settings.namespace

    def component_hash(self, pool: Obj) -> str | None:
        """The pool's hypervisor configuration hash: the hash of its agent pod rendered for a
        placeholder node, so it changes with everything a pool shares (image, template, env,
        hardware metadata) and not with the nodes; None on a bad template."""
        placeholder: Obj = {"metadata": {"name": "node", "uid": "",
                                         "labels": {KEYS.managed_by: name_of(pool)}}}  # fmt: skip
        try:
            return pod_hash_of(self.render(placeholder, placeholder, pool))
        except HypervisorTemplateError:
            return None

    # ---- reconcile --------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until cancelled (after `wait_synced`)."""
        if self._wait_synced is not None:
            await self._wait_synced()
        await self.loop.run()

    def render(self, gpu_node: Obj, node: Obj, pool: Obj) -> dict[str, object]:
        """The rendered agent pod of a GPUNode (`HypervisorTemplateError` on a bad template)."""
        vendor = labels_of(gpu_node).get(KEYS.hardware_vendor) or _DEFAULT_VENDOR
        template_name = (pool.get("spec") or {}).get("schedulingConfigTemplate")
        template = self._templates.get(str(template_name)) if template_name else None
        extra = dict(self._extra_labels())
        inputs = HypervisorInputs(
            gpu_node=gpu_node, node=node, pool=pool,
            hardware_metadata=hardware_metadata_json(self._providers.list(), vendor),
            scheduling_config=scheduling_config_json(template),
            metrics_extra_labels=json.dumps(extra, sort_keys=True) if extra else "",
            middleware_image=middleware_image(self._providers.list(), vendor),
        )  # fmt: skip
        return render_hypervisor_pod(inputs, self._settings)

    async def reconcile(self, name: str) -> float | None:
        """Create, keep or delete the node's agent pod."""
        gpu_node = self._gpu_nodes.get(name)
        if gpu_node is None:
            gone = self.sync.pop(name, None)
            self._selected.discard(name)
            if gone is not None:
                for listener in self.sync_listeners:
                    listener(gone.pool)
            return None
        pool_name = str(labels_of(gpu_node).get(KEYS.managed_by) or "")
        pool = self._pools.get(pool_name) if pool_name else None
        if pool is None:
            return None  # the pool's event brings the node back
        node = self._nodes.get(name)
        namespace = self._settings.namespace
        pod = self._pods.get(hypervisor_pod_name(name), namespace)
        if pod is not None:
            self._created.pop(name, None)
        elif name in self._created:
            unseen = time.monotonic() - self._created[name]
            if unseen < CREATED_UNSEEN_S:
                return CREATED_UNSEEN_S - unseen  # created moments ago: no second POST
            del self._created[name]
        desired: dict[str, object] | None = None
        if node is not None:
            try:
                desired = self.render(gpu_node, node, pool)
            except HypervisorTemplateError as error:
                await self._report_template(pool, str(error))
                return None
            self._template_errors.pop(pool_name, None)
        desired_hash = pod_hash_of(desired) if desired is not None else ""
        decision = decide_hypervisor_pod(
            gpu_node=gpu_node, node=node, pod=pod, desired_hash=desired_hash,
            max_crash_count=self._max_crash_count(), selected=name in self._selected,
        )  # fmt: skip
        current = pod_hash_of(pod) if pod is not None and not is_deleting(pod) else None
        if decision.action is PodAction.CREATE and desired is not None:
            await self._create(name, desired)
            current = desired_hash
        elif decision.action is PodAction.DELETE and pod is not None:
            if await self.writer.delete("Pod", name_of(pod), namespace):
                _log.info("deleted agent pod %s of node %s: %s", name_of(pod), name,
                          decision.reason)  # fmt: skip
            current = None
            if decision.crash_loop:
                await self.writer.note(involved("GPUNode", gpu_node), "Warning",
                                       CRASH_LOOP_RECREATE, decision.reason)  # fmt: skip
        elif decision.out_of_sync:
            _log.debug("agent pod of node %s out of sync: %s", name, decision.reason)
        entry = PodSync(pool_name, desired_hash, current, decision.out_of_sync)
        previous, self.sync[name] = self.sync.get(name), entry
        if entry.in_sync:
            self._selected.discard(name)
        if entry != previous:
            for listener in self.sync_listeners:
                listener(pool_name)
        return None

    async def _create(self, name: str, desired: Mapping[str, object]) -> None:
        try:
            await self.writer.create("Pod", desired)
        except KubeError as error:
            if error.code != 409:
                raise
            return  # the cache lags; the pod's event brings the next look
        self._created[name] = time.monotonic()
        _log.info("created agent pod %s on node %s (hash %s)", metadata_of(desired).get("name"),
                  name, pod_hash_of(desired))  # fmt: skip

    async def _report_template(self, pool: Obj, message: str) -> None:
        name = name_of(pool)
        if self._template_errors.get(name) == message:
            return
        self._template_errors[name] = message
        _log.warning("pool %s: no agent pods: %s", name, message)
        await self.writer.note(involved("GPUPool", pool), "Warning", TEMPLATE_INVALID,
                               f"agent pods cannot be rendered: {message}")  # fmt: skip
