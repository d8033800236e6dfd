"""The control plane's binaries: where `testenv/build.sh` puts them, at which versions."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tensorfusion.devenv.processes import ControlPlaneError
from tensorfusion.devenv.source_tree import VERSIONS_FILE

__all__ = [
    "COMPONENT_BINARIES",
    "REAL_NODE_BINARIES",
    "Binaries",
    "MissingBinariesError",
    "binary_directory",
    "read_versions",
    "taint_admission_plugin",
]

COMPONENT_BINARIES = {
    "kubernetes": ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"),
    "etcd": ("etcd",),
    "helm": ("helm",),
}

#: The real nodes' binaries (e2e tier), by component of testenv/build.sh.
REAL_NODE_BINARIES = {
    "node": ("kubelet", "kube-proxy"),
    "containerd": ("containerd", "containerd-shim-runc-v2", "ctr"),
    "coredns": ("coredns",),
    "pause": ("pause",),
}

#: The versions.env key of a component that does not have a <COMPONENT>_VERSION of its own.
_VERSION_KEY = {"node": "KUBERNETES_VERSION", "pause": "KUBERNETES_VERSION"}


class MissingBinariesError(ControlPlaneError):
    """The testenv binaries have not been built (or were built for other versions)."""


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of ``testenv/versions.env``."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def binary_directory(kubernetes_version: str) -> Path:
    """Where ``testenv/build.sh`` puts the binaries (keep in step with the script)."""
    root = os.environ.get("TF_TESTENV_CACHE")
    if root:
        return Path(root) / kubernetes_version
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "tensor-fusion" / "testenv" / kubernetes_version


@dataclass(frozen=True)
class Binaries:
    """The built binaries of one testenv version."""

    directory: Path
    versions: Mapping[str, str]

    @property
    def kubernetes_version(self) -> str:
        return self.versions["KUBERNETES_VERSION"]

    def path(self, name: str) -> Path:
        return self.directory / name

    @classmethod
    def locate(cls, versions_file: Path = VERSIONS_FILE, *, real_nodes: bool = False) -> Binaries:
        """Finds the binaries for the versions in ``versions_file`` (with `real_nodes`, the
        nodes' too), or says how to build them."""
        versions = read_versions(versions_file)
        directory = binary_directory(versions["KUBERNETES_VERSION"])
        problems: list[str] = []
        components = {**COMPONENT_BINARIES, **(REAL_NODE_BINARIES if real_nodes else {})}
        for component, names in components.items():
            wanted = versions[_VERSION_KEY.get(component, f"{component.upper()}_VERSION")]
            stamp = directory / f".built-{component}"
            built = stamp.read_text().strip() if stamp.is_file() else None
            absent = [name for name in names if not os.access(directory / name, os.X_OK)]
            if absent:
                problems.append(f"{', '.join(absent)} missing")
            elif built != wanted:
                problems.append(f"{component} built for {built}, {wanted} wanted")
        if problems:
            raise MissingBinariesError(
                f"the test control plane is not built in {directory} ({'; '.join(problems)}). "
                "Run `make testenv` (bash testenv/build.sh) to build it from Go modules; the "
                "first build takes about half an hour on 2 cores, later runs reuse it. "
                "`make test` and `make test-cluster` do this for you."
            )
        return cls(directory, versions)


@cache
def taint_admission_plugin(apiserver: Path) -> str:
    """Name of the node-taint admission plugin of this kube-apiserver.

    It was renamed (TaintNodesByCondition, TaintNodesAtCreation), and an unknown name in
    ``--disable-admission-plugins`` aborts startup, so ask the binary.
    """
    help_text = subprocess.run(
        [str(apiserver), "--help"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    match = re.search(r"\bTaintNodes[A-Za-z]+", help_text)
    if match is None:
        raise ControlPlaneError(f"no TaintNodes* admission plugin in `{apiserver} --help`")
    return match.group(0)
