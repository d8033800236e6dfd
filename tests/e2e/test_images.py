"""The images of `make images BASE=debian`, run with podman: each command answers `--help`, the
controller's kube-scheduler is the test control plane's version, and users, labels and entry
points are as docs/images.md says."""

from __future__ import annotations

import json

import pytest

import tensorfusion
from tensorfusion.devenv.binaries import read_versions
from tensorfusion.devenv.real_nodes.netns import run

pytestmark = pytest.mark.e2e


def podman_run(image: str, *argv: str, entrypoint: str | None = None) -> str:
    """The output of a container of `image` (no network: nothing leaves, nothing is added)."""
    flags = [
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
    ]
    if entrypoint is not None:
        flags += ["--entrypoint", entrypoint]
    return run(["podman", "--runtime", "runc", "run", *flags, image, *argv]).stdout


def inspect(image: str) -> dict[str, object]:
    config: dict[str, object] = json.loads(run(["podman", "image", "inspect", image]).stdout)[0]
    return config


def test_operator_image(e2e_images: dict[str, str]) -> None:
    image = e2e_images["operator"]
    assert "controller" in podman_run(image, "tensor-fusion", "--help")
    assert "Usage" in podman_run(image, "/manager", "--help")
    version = read_versions()["KUBERNETES_VERSION"]
    assert podman_run(image, "kube-scheduler", "--version").strip() == f"Kubernetes {version}"
    assert podman_run(image, "id", "-u").strip() == "65532"
    config = inspect(image)["Config"]
    assert isinstance(config, dict)
    assert config["User"] == "65532:65532"
    assert config["Cmd"] == ["/manager"] and not config.get("Entrypoint")
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == tensorfusion.__version__
    assert labels["org.opencontainers.image.title"] == "tensor-fusion-operator"


def test_hypervisor_image(e2e_images: dict[str, str]) -> None:
    image = e2e_images["hypervisor"]
    assert "hypervisor" in podman_run(image, "tensor-fusion", "hypervisor", "--help")
    assert podman_run(image, "id", "-u").strip() == "0"  # the agent pod is privileged
    podman_run(image, "python", "-c", "import pynvml")
    config = inspect(image)["Config"]
    assert isinstance(config, dict)
    assert config["Cmd"] == ["tensor-fusion", "hypervisor"]
    assert config["Labels"]["org.opencontainers.image.title"] == "tensor-fusion-hypervisor"


def test_alertmanager_image(e2e_images: dict[str, str]) -> None:
    image = e2e_images["alertmanager"]
    tag = image.rsplit(":", 1)[1]
    assert f"version {tag}" in podman_run(image, "--version")
    assert podman_run(image, "-u", entrypoint="id").strip() == "65534"
    config = inspect(image)["Config"]
    assert isinstance(config, dict)
    assert config["Entrypoint"] == ["/bin/alertmanager"]
    assert config["Labels"]["org.opencontainers.image.version"] == tag
