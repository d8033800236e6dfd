"""One real node: containerd, kubelet and kube-proxy in the node's network namespace and a mount
namespace of its own.

Several nodes share this machine's file system, PID space and cgroup hierarchies. In its mount
namespace a node sees its own directories at the paths a node's pods expect
(`/var/lib/kubelet`, the kubelet's root, `/run/tensor-fusion`, the agent's host path, and
`/run/containerd`, where the shims put their sockets, and `/var/log/pods` and
`/var/log/containers`, the containers' logs), and
every mount its kubelet and containerd make stays there: it goes when the node's processes end.
Each node also has a cgroup root under every cgroup v1 hierarchy. `stop` ends the node's
processes and containers and removes its cgroups.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tensorfusion.devenv.binaries import Binaries
from tensorfusion.devenv.control_plane import ControlPlane
from tensorfusion.devenv.processes import START_TIMEOUT, Component, wait_until
from tensorfusion.devenv.real_nodes import netns
from tensorfusion.devenv.real_nodes.network import (
    CONTROL_PLANE_ADDRESS,
    SERVICE_CIDR,
    node_address,
    pod_subnet,
)

CGROUP_V1 = Path("/sys/fs/cgroup")
#: Paths of the machine that each node has a directory of its own at (in its mount namespace):
#: the kubelet's root, the agent's host path, the containerd shims' sockets, the pods' logs.
NODE_PATHS = (
    "/var/lib/kubelet",
    "/run/tensor-fusion",
    "/run/containerd",
    "/var/log/pods",
    "/var/log/containers",
)
CNI_PLUGINS = Path("/usr/lib/cni")
CLUSTER_DOMAIN = "cluster.local"
#: Where the pods find cluster DNS: CoreDNS in the control plane's namespace.
CLUSTER_DNS = CONTROL_PLANE_ADDRESS


@dataclass
class RealNode:
    """Node `index` (1-based) of a cluster, named `name`."""

    name: str
    index: int
    network_path: Path
    workdir: Path
    binaries: Binaries
    sandbox_image: str
    cgroup_root: str
    """The node's cgroup root, the same path in every hierarchy (unique on this machine)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    _holder_pid: int | None = None

    @property
    def address(self) -> str:
        return node_address(self.index)

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def start(self, plane: ControlPlane, timeout: float = START_TIMEOUT) -> None:
        """Starts containerd, then kubelet and kube-proxy, with credentials from `plane`."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._make_cgroups()
        self._start_mount_namespace(timeout)
        self._start_containerd(timeout)
        self._start_kubelet(plane)
        self._start_kube_proxy(plane)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`ctr` against this node's containerd, in its CRI namespace."""
        return netns.run(
            [
                self.binaries.path("ctr"),
                "--address",
                str(self.socket),
                "--namespace",
                "k8s.io",
                *args,
            ],
            check=check,
        )

    def import_images(self, archives: Sequence[Path]) -> None:
        """Imports image archives (docker-archive) into this node's containerd."""
        for archive in archives:
            self.ctr("images", "import", "--no-unpack", str(archive))

    # -- processes

    def _launch(self, name: str, argv: Sequence[str | Path]) -> Component:
        component = Component(
            f"{self.name}-{name}", self._enter(argv), self.workdir / f"{name}.log"
        )
        component.start()
        self.components.append(component)
        return component

    def host_path(self, path: str) -> Path:
        """The node's own directory behind `path` of `NODE_PATHS` (what its pods see there)."""
        if path not in NODE_PATHS:
            raise ValueError(f"{path} is not one of the node's own paths {NODE_PATHS}")
        return self.workdir / "paths" / path.strip("/").replace("/", "-")

    def _enter(self, argv: Sequence[str | Path]) -> list[str]:
        """`argv` run in the node's network and mount namespaces."""
        assert self._holder_pid is not None, "the node's mount namespace is not up"
        return [
            "nsenter",
            f"--net={self.network_path}",
            f"--mount=/proc/{self._holder_pid}/ns/mnt",
            "--",
            *(str(a) for a in argv),
        ]

    def _start_mount_namespace(self, timeout: float) -> None:
        """A holder process (pause) in a new mount namespace, private to the node; the node's
        own directories bind-mounted there at `NODE_PATHS`."""
        holder = Component(
            f"{self.name}-mounts",
            ["unshare", "--mount", "--propagation", "private", "--", self.binaries.path("pause")],
            self.workdir / "mounts.log",
        )
        holder.start()
        self.components.append(holder)
        own = os.readlink("/proc/self/ns/mnt")

        def unshared() -> bool:
            with contextlib.suppress(OSError):
                return os.readlink(f"/proc/{holder.pid}/ns/mnt") != own
            return False

        wait_until(
            unshared,
            what=f"the mount namespace of {self.name}",
            timeout=timeout,
            components=[holder],
        )
        self._holder_pid = holder.pid
        script = ["set -e"]
        for path in NODE_PATHS:
            own_dir = self.host_path(path)
            own_dir.mkdir(parents=True, exist_ok=True)
            script += [
                f"mkdir -p {path}",
                f"mount --bind {own_dir} {path}",
                f"mount --make-rshared {path}",
            ]
        netns.run(
            ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "--", "sh", "-c", "; ".join(script)]
        )

    def _start_containerd(self, timeout: float) -> None:
        root = self.workdir / "containerd"
        cni = self.workdir / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-bridge.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        config.write_text(self._containerd_config(root, cni))
        containerd = self._launch(
            "containerd", [self.binaries.path("containerd"), "--config", str(config)]
        )
        wait_until(
            lambda: self.socket.is_socket() and self.ctr("version", check=False).returncode == 0,
            what=f"containerd of {self.name}",
            timeout=timeout,
            components=[containerd],
        )

    def _containerd_config(self, root: Path, cni: Path) -> str:
        # The shims find their runtime by PATH: containerd-shim-runc-v2 sits beside containerd.
        return f"""version = 3
root = "{root / "root"}"
state = "{root / "state"}"
# NRI listens on one fixed socket of the machine: a second containerd would take it over.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{self.sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # Without CAP_SYS_RESOURCE the sandbox's oom_score_adj of -998 cannot be set.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not the machine's /run/netns.
  netns_mounts_under_state_dir = true
  tolerate_missing_hugetlb_controller = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_PLUGINS}"]
    conf_dir = "{cni}"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      Root = "{root / "runc"}"
      SystemdCgroup = false
"""

    def _cni_config(self) -> dict[str, object]:
        return {
            "cniVersion": "1.0.0",
            "name": "tf-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": pod_subnet(self.index)}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni-ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _start_kubelet(self, plane: ControlPlane) -> None:
        pki = self.workdir / "pki"
        kubeconfig = plane.client_kubeconfig(
            pki, "kubelet-client", user=f"system:node:{self.name}", groups=("system:nodes",)
        )
        plane.ca.issue(self.name, hosts=(self.name, self.address), server=True).write(
            pki, "kubelet"
        )
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("")  # pods resolve through cluster DNS only: nothing leaves
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address,
            "healthzBindAddress": "127.0.0.1",
            "readOnlyPort": 0,
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(plane.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "rotateCertificates": False,
            "serializeImagePulls": False,
            "maxPods": 40,
            # The machine's disk is shared and may be fuller than a node's would be.
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "localStorageCapacityIsolation": False,
            "staticPodPath": "",
        }
        config_path = self.workdir / "kubelet-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        labels = ",".join(f"{key}={value}" for key, value in self.labels.items())
        self._launch(
            "kubelet",
            [
                self.binaries.path("kubelet"),
                f"--config={config_path}",
                f"--kubeconfig={kubeconfig}",
                "--root-dir=/var/lib/kubelet",
                f"--cert-dir={pki}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.address}",
                *([f"--node-labels={labels}"] if labels else []),
                "--v=1",
            ],
        )

    def _start_kube_proxy(self, plane: ControlPlane) -> None:
        kubeconfig = plane.client_kubeconfig(
            self.workdir / "pki", "kube-proxy", user="system:kube-proxy"
        )
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "bindAddress": self.address,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "mode": "iptables",
            "clusterCIDR": "10.251.0.0/16",
            # Service traffic leaves with the node's address, so a backend on the same bridge
            # answers through the node (no br_netfilter needed for hairpin traffic).
            "iptables": {"masqueradeAll": True},
            # The conntrack table size is the machine's, not the namespace's: leave it alone.
            "conntrack": {"maxPerCore": 0, "min": 0},
        }
        config_path = self.workdir / "kube-proxy-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._launch(
            "kube-proxy", [self.binaries.path("kube-proxy"), f"--config={config_path}", "--v=1"]
        )

    # -- cgroups

    def _hierarchies(self) -> list[Path]:
        return [
            path
            for path in sorted(CGROUP_V1.iterdir())
            if path.is_dir() and not path.is_symlink() and path.name != "unified"
        ]

    def _make_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            directory = hierarchy / self.cgroup_root.lstrip("/")
            directory.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (directory / key).write_text((hierarchy / key).read_text())

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if not root.is_dir():
                continue
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(line) for line in procs.read_text().split())
        return pids

    def _remove_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if not root.is_dir():
                continue
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()

    # -- stop

    def stop(self) -> None:
        """Stops the node's processes and containers; unmounts and removes what they left."""
        while self.components:
            self.components.pop().stop()
        shims = _processes_naming(str(self.socket))
        for pid in {*self._cgroup_pids(), *shims}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self._cgroup_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._remove_cgroups()


def _processes_naming(text: str) -> list[int]:
    """PIDs whose command line contains `text` (the containerd shims of one node)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


__all__ = ["CLUSTER_DNS", "CLUSTER_DOMAIN", "NODE_PATHS", "SERVICE_CIDR", "RealNode"]
