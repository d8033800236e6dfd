"""The network of a real-node cluster: one namespace for the control plane (its bridge is the
nodes' switch) and one per node, joined by veth pairs; every address lives inside them.

    control plane  <prefix>     bridge tf0 10.250.0.1/24; routes to each node's pod subnet
    node i         <prefix>-i   eth0 10.250.0.(10+i)/24, default route via 10.250.0.1;
                                pods on the CNI bridge in 10.251.i.0/24
    Services       10.252.0.0/16 (kube-proxy in each node namespace); API Service 10.252.0.1
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tensorfusion.devenv.real_nodes import netns

CONTROL_PLANE_ADDRESS = "10.250.0.1"
NODE_PREFIX_LENGTH = 24
SERVICE_CIDR = "10.252.0.0/16"
API_SERVICE_ADDRESS = "10.252.0.1"
BRIDGE = "tf0"


def node_address(index: int) -> str:
    """The address of node `index` (1-based) on the switch."""
    return f"10.250.0.{10 + index}"


def pod_subnet(index: int) -> str:
    """The pod subnet of node `index` (1-based)."""
    return f"10.251.{index}.0/24"


@dataclass(frozen=True)
class ClusterNetwork:
    """The namespaces of one cluster, named from `prefix` (short: interface names derive from
    it)."""

    prefix: str
    nodes: int

    @property
    def control_plane(self) -> str:
        return self.prefix

    @property
    def control_plane_path(self) -> Path:
        return netns.netns_path(self.control_plane)

    def node(self, index: int) -> str:
        """The namespace of node `index` (1-based)."""
        return f"{self.prefix}-{index}"

    def node_path(self, index: int) -> Path:
        return netns.netns_path(self.node(index))

    def create(self) -> None:
        """Creates every namespace, the switch, the links, addresses and routes; on failure
        removes what it made."""
        try:
            self._create()
        except BaseException:
            self.delete()
            raise

    def _create(self) -> None:
        cp = self.control_plane
        netns.add(cp)
        netns.ip(cp, "link", "add", BRIDGE, "type", "bridge")
        netns.ip(cp, "addr", "add", f"{CONTROL_PLANE_ADDRESS}/{NODE_PREFIX_LENGTH}", "dev", BRIDGE)
        netns.ip(cp, "link", "set", BRIDGE, "up")
        netns.sysctl(cp, "net.ipv4.ip_forward", "1")
        for index in range(1, self.nodes + 1):
            name = self.node(index)
            netns.add(name)
            port = f"n{index}"
            netns.ip(cp, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name)
            netns.ip(cp, "link", "set", port, "master", BRIDGE)
            netns.ip(cp, "link", "set", port, "up")
            netns.ip(
                name, "addr", "add", f"{node_address(index)}/{NODE_PREFIX_LENGTH}", "dev", "eth0"
            )
            netns.ip(name, "link", "set", "eth0", "up")
            netns.ip(name, "route", "add", "default", "via", CONTROL_PLANE_ADDRESS)
            netns.sysctl(name, "net.ipv4.ip_forward", "1")
            netns.ip(cp, "route", "add", pod_subnet(index), "via", node_address(index))
        for index in range(1, self.nodes + 1):
            for other in range(1, self.nodes + 1):
                if other != index:
                    netns.ip(
                        self.node(index),
                        "route",
                        "add",
                        pod_subnet(other),
                        "via",
                        node_address(other),
                    )

    def delete(self) -> None:
        """Removes every namespace of the cluster (their links and routes go with them)."""
        for index in range(1, self.nodes + 1):
            netns.delete(self.node(index))
        netns.delete(self.control_plane)
