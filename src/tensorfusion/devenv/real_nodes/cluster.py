"""A real-node cluster on one machine: the control plane, CoreDNS and the default kube-scheduler
in one network namespace, each node (containerd, kubelet, kube-proxy) in its own.

This process reaches the API server through a loopback port relayed into the namespace
(`ControlPlane.api_url`, `ControlPlane.kubeconfig`); everything else stays inside.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tensorfusion.devenv.binaries import Binaries
from tensorfusion.devenv.control_plane import ControlPlane, Site
from tensorfusion.devenv.processes import (
    LOOPBACK,
    START_TIMEOUT,
    Component,
    ControlPlaneError,
    insecure_context,
    wait_until,
)
from tensorfusion.devenv.real_nodes import netns
from tensorfusion.devenv.real_nodes.network import (
    API_SERVICE_ADDRESS,
    CONTROL_PLANE_ADDRESS,
    SERVICE_CIDR,
    ClusterNetwork,
)
from tensorfusion.devenv.real_nodes.node import CLUSTER_DOMAIN, NODE_PATHS, RealNode

#: Directories of the machine the nodes create when absent (mount points of the nodes' own
#: directories), removed again when the cluster stops.
MACHINE_PATHS = NODE_PATHS

#: What CoreDNS's kubernetes plugin reads (user system:coredns, bound when the cluster starts).
COREDNS_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
"""


@dataclass
class RealNodeCluster:
    """`nodes` (name -> labels) on this machine, with the images of `archives` in every node."""

    binaries: Binaries
    workdir: Path
    prefix: str
    nodes: Mapping[str, Mapping[str, str]]
    sandbox_image: str
    archives: Sequence[Path] = ()
    plane: ControlPlane | None = None
    real_nodes: list[RealNode] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)
    startup_seconds: float = 0.0
    _created: list[Path] = field(default_factory=list)

    @property
    def network(self) -> ClusterNetwork:
        return ClusterNetwork(self.prefix, len(self.nodes))

    @property
    def control_plane(self) -> ControlPlane:
        if self.plane is None:
            raise ControlPlaneError("the real-node cluster has not started")
        return self.plane

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Creates the network, starts everything, waits for every node Ready."""
        if os.geteuid() != 0:
            raise ControlPlaneError(
                "real nodes need root (network namespaces, mounts, cgroups): run the e2e tier "
                "as root, as CI does"
            )
        started = time.monotonic()
        self._created = [Path(path) for path in MACHINE_PATHS if not Path(path).exists()]
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _start(self, timeout: float) -> None:
        network = self.network
        network.delete()  # a namespace of an interrupted run with this prefix
        network.create()
        site = Site(
            address=CONTROL_PLANE_ADDRESS,
            netns=network.control_plane_path,
            service_cluster_ip_range=SERVICE_CIDR,
            api_service_address=API_SERVICE_ADDRESS,
        )
        self.plane = ControlPlane(self.binaries, self.workdir / "control-plane", site=site)
        self.plane.start(timeout)
        self._start_default_scheduler(timeout)
        self._start_coredns(timeout)
        for index, (name, labels) in enumerate(self.nodes.items(), start=1):
            node = RealNode(
                name=name,
                index=index,
                network_path=network.node_path(index),
                workdir=self.workdir / name,
                binaries=self.binaries,
                sandbox_image=self.sandbox_image,
                cgroup_root=f"/{self.prefix}-{name}",
                labels=labels,
            )
            self.real_nodes.append(node)
            node.start(self.plane, timeout)
            node.import_images(self.archives)
        self._wait_ready(timeout)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl against the cluster (from this process, through the relay)."""
        argv: list[str | Path] = [
            self.binaries.path("kubectl"),
            f"--kubeconfig={self.control_plane.kubeconfig}",
            *args,
        ]
        return netns.run(argv, stdin=stdin).stdout

    def helm(self, *args: str) -> str:
        """helm against the cluster (from this process, through the relay)."""
        environment = self.control_plane.tool_environment()
        argv = [str(self.binaries.path("helm")), *args]
        result = subprocess.run(
            argv, capture_output=True, text=True, env=environment, check=False, timeout=600
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"exit {result.returncode}: {' '.join(argv)}\n{result.stderr}")
        return result.stdout

    def _wait_ready(self, timeout: float) -> None:
        def ready() -> bool:
            path = (
                '{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}'
            )
            text = self.kubectl("get", "nodes", "-o", f'jsonpath={path}{{"\\n"}}{{end}}')
            states = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
            return all(states.get(name) == "True" for name in self.nodes)

        wait_until(
            ready,
            what=f"nodes {', '.join(self.nodes)} Ready",
            timeout=timeout,
            components=self.all_components(),
            interval=1.0,
        )

    def all_components(self) -> list[Component]:
        """Every process of the cluster (for `wait_until`/`eventually`: logs, early exits)."""
        nodes = [component for node in self.real_nodes for component in node.components]
        return [*self.control_plane.components, *self.components, *nodes]

    def _launch(self, name: str, argv: Sequence[str | Path]) -> Component:
        component = Component(
            name,
            netns.nsenter(self.network.control_plane_path, argv),
            self.control_plane.log_dir / f"{name}.log",
        )
        component.start()
        self.components.append(component)
        return component

    def _start_default_scheduler(self, timeout: float) -> None:
        plane = self.control_plane
        configuration = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(plane.internal_kubeconfig)},
            "leaderElection": {"leaderElect": False},
        }
        scheduler, url = plane.launch_scheduler(configuration, self.workdir / "kube-scheduler")
        plane.components.append(scheduler)
        wait_until(
            lambda: plane.site.probe(url, insecure_context()),
            what="the default kube-scheduler",
            timeout=timeout,
            components=[scheduler],
        )

    def _start_coredns(self, timeout: float) -> None:
        plane = self.control_plane
        self.kubectl("apply", "-f", "-", stdin=COREDNS_RBAC)
        directory = self.workdir / "coredns"
        kubeconfig = plane.client_kubeconfig(directory, "coredns", user="system:coredns")
        corefile = directory / "Corefile"
        # No forward plugin: names outside the cluster get no answer from outside.
        corefile.write_text(f""".:53 {{
    errors
    bind {CONTROL_PLANE_ADDRESS}
    health {LOOPBACK}:8080
    ready {LOOPBACK}:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} testenv
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
        coredns = self._launch("coredns", [self.binaries.path("coredns"), "-conf", str(corefile)])
        wait_until(
            lambda: plane.site.probe(f"http://{LOOPBACK}:8181/ready"),
            what="CoreDNS ready",
            timeout=timeout,
            components=[coredns],
        )

    def stop(self) -> None:
        """Stops every node, CoreDNS, the scheduler and the control plane; removes the
        namespaces."""
        while self.real_nodes:
            self.real_nodes.pop().stop()
        while self.components:
            self.components.pop().stop()
        if self.plane is not None:
            self.plane.stop()
        self.network.delete()
        for path in self._created:
            with contextlib.suppress(OSError):
                path.rmdir()
