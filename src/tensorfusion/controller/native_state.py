"""The native view of the cluster (Nodes and the pods bound to them), kept by informer events.

`/api/simulate-schedule` and the extender read it for kube-scheduler's native filters and the
NodeResourcesFit score: every pod bound to a node and not finished counts on that node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.object_views import uid_of
from tensorfusion.domain.scheduling.native import NativeInputError, NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = ["NativeState"]

_log = logging.getLogger(__name__)
_FINISHED = frozenset({"Succeeded", "Failed"})


class NativeState:
    """A `NativeCluster` fed by the Node and bound-pod informers."""

    def __init__(self, plugins: NativePlugins) -> None:
        self.cluster = NativeCluster(plugins)
        self.invalid: dict[str, str] = {}
        """Pods the native view could not read (quantities), by UID: logged, not counted."""

    def on_node(self, event: InformerEvent) -> None:
        """A Node changed."""
        if event.kind is EventKind.DELETED:
            self.cluster.remove_node(event.key.name)
        else:
            self.cluster.set_node(event.key.name, event.obj)

    def on_pod(self, event: InformerEvent) -> None:
        """A pod changed: it counts on its node while bound and not finished."""
        pod = event.obj
        uid = uid_of(pod) or str(event.key)
        node = (pod.get("spec") or {}).get("nodeName")
        if event.kind is EventKind.DELETED or not node or _finished(pod):
            self.cluster.forget_pod(uid)
            self.invalid.pop(uid, None)
            return
        if uid in self.cluster.bound and self.cluster.bound[uid] == node:
            return
        try:
            self.cluster.add_pod(uid, pod)
        except NativeInputError as error:
            self.invalid[uid] = str(error)
            _log.warning("pod %s not counted on node %s: %s", event.key, node, error)
            return
        self.cluster.bind(uid, str(node))


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _FINISHED
