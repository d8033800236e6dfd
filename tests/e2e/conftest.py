"""The e2e tier: the chart's images on real nodes (kubelet, containerd, kube-proxy, CoreDNS),
all inside network namespaces this run creates and removes (docs/testing.md, "Real nodes").

Fixtures:
- ``host_network``: the machine's own addresses, routes and firewall rules, and which of the
  paths the nodes mount their own directories at exist, checked unchanged when the session
  ends (the network rule of these machines; nothing left behind).
- ``real_cluster``: the session's two-node cluster, the images of `make images BASE=debian`
  imported into every node.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tensorfusion
from tensorfusion.devenv.binaries import Binaries
from tensorfusion.devenv.real_nodes import images
from tensorfusion.devenv.real_nodes.cluster import RealNodeCluster
from tensorfusion.devenv.real_nodes.netns import run
from tensorfusion.devenv.real_nodes.node import NODE_PATHS

pytestmark = pytest.mark.e2e

#: The nodes and their labels (a test makes them GPU nodes when it needs them).
NODES: dict[str, dict[str, str]] = {"node-a": {}, "node-b": {}}


def image_names() -> dict[str, str]:
    """The images the tier runs, by role."""
    version = tensorfusion.__version__
    alertmanager = f"{images.PREFIX}/alertmanager-debian"
    return {
        "operator": f"{images.PREFIX}/tensor-fusion-operator:{version}",
        "hypervisor": f"{images.PREFIX}/tensor-fusion-hypervisor:{version}",
        "alertmanager": f"{alertmanager}:{images.tag_of(alertmanager)}",
    }


def _host_network() -> dict[str, str]:
    commands = {
        "addresses": ["ip", "-br", "addr"],
        "routes": ["ip", "route"],
        "routes6": ["ip", "-6", "route"],
        "rules": ["iptables-save"],
    }
    state = {"paths": " ".join(path for path in NODE_PATHS if Path(path).exists())}
    for name, argv in commands.items():
        lines = run(argv).stdout.splitlines()
        state[name] = "\n".join(line for line in lines if not line.startswith("#"))
    return state


@pytest.fixture(scope="package", autouse=True)
def host_network() -> Iterator[None]:
    """Fails the session's last test if the machine's own network changed."""
    before = _host_network()
    yield
    assert _host_network() == before, "the e2e run changed the machine's network or left paths"


@pytest.fixture(scope="package")
def e2e_images() -> dict[str, str]:
    return image_names()


@pytest.fixture(scope="package")
def real_cluster(
    tmp_path_factory: pytest.TempPathFactory, host_network: None, e2e_images: dict[str, str]
) -> Iterator[RealNodeCluster]:
    """Two real nodes and their control plane, for the tier's tests (stopped after them, so the
    later tiers do not share the machine with them)."""
    binaries = Binaries.locate(real_nodes=True)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = cache / "tensor-fusion" / "e2e-images"
    pause = images.pause_image(binaries)
    archives = [images.archive(name, cache) for name in (*e2e_images.values(), pause)]
    images.prune(cache, archives)
    cluster = RealNodeCluster(
        binaries=binaries,
        workdir=tmp_path_factory.mktemp("realnodes"),
        prefix=f"tfe2e{os.getpid()}",
        nodes=NODES,
        sandbox_image=pause,
        archives=archives,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
