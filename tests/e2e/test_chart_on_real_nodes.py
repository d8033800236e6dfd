"""The production guide on real nodes: `helm upgrade --install` with the built images, the
production overlay and a my-values file, then the guide's Verify section on pods a kubelet runs.

- 2 controller pods Running on different nodes (the guide's required anti-affinity), 3
  Alertmanager pods Running on volumes of the default StorageClass;
- the cluster and its pool Running; GPU nodes and GPUs discovered by agent pods that the
  controller made from the pool's template (simulated GPUs, the real kubelet's device plugin);
- controller logs without errors, read with `kubectl logs deploy/...` (the kubelet serves them);
- the guide's enabled-replicas Deployment: its TensorFusion replicas admitted by the webhook,
  which the API server reaches through its Service, scheduled by tensor-fusion-scheduler and
  running; the replica that keeps nvidia.com/gpu waits for a GPU no node has;
- the active controller pod deleted: new TensorFusion pods are still admitted and scheduled;
- GPU isolation (issue 27): each agent runs the MPS control daemon (the stand-in
  `nvidia-cuda-mps-control`, `TF_MPS=on`) and reports it Running in its GPUNode; a worker the
  kubelet starts gets, through the agent's Allocate, the MPS variables of its limits and the
  daemon's pipe directory (where it sees the daemon's socket) and shared memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.devenv.processes import wait_until
from tensorfusion.devenv.real_nodes.cluster import RealNodeCluster
from tensorfusion.devenv.source_tree import SOURCE_DIR
from tensorfusion.runtime.leader_election import LEASE_NAME
from tests.standins import MPS_CONTROL

pytestmark = pytest.mark.e2e

RELEASE = NAMESPACE = "tensor-fusion-sys"
CHART = SOURCE_DIR / "charts" / "tensor-fusion"
SNIPPETS = SOURCE_DIR / "examples" / "production"
SIMULATED = "/run/tensor-fusion/simulated-gpus.yaml"
MPS_STANDIN = "/run/tensor-fusion/mps-standin/nvidia-cuda-mps-control"
GPU_LABEL = "nvidia.com/gpu.present"

STORAGE = """
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
"""


def persistent_volume(name: str, path: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "e2e-local",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
        },
    }


def simulation(node: str) -> str:
    return "gpus:\n" + "".join(
        f"  - model: NVIDIA H100 80GB HBM3\n    vram: 80Gi\n    uuid: GPU-{node}-{g}\n"
        "    usage: {temperature: 45}\n"
        for g in range(2)
    )


def my_values(path: Path, images: dict[str, str]) -> Path:
    """The guide's my-values.yaml for this cluster: the required anti-affinity, the embedded
    store (no GreptimeDB runs here), the images built here, requests that fit 2-core nodes, and
    no vendor middleware image (none is built here)."""
    values: dict[str, Any] = {}
    for snippet in ("embedded-store", "required-anti-affinity"):
        for key, value in yaml.safe_load((SNIPPETS / f"{snippet}.yaml").read_text()).items():
            values[key] = {**values.get(key, {}), **value}

    def image(name: str) -> dict[str, str]:
        repository, tag = images[name].rsplit(":", 1)
        return {"repository": repository, "tag": tag}

    small = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    values["controller"] = {
        **values.get("controller", {}),
        "image": image("operator"),
        "resources": {**small, "limits": {"memory": "2Gi"}},
    }
    values["cluster"] = {"hypervisorImage": image("hypervisor")}
    values["alert"] = {"image": image("alertmanager"), "resources": small}
    values["agent"] = {"resources": small}
    values["providerConfigs"] = {"nvidia": {"images": {"middleware": None}}}
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_production_guide_on_real_nodes(
    real_cluster: RealNodeCluster, e2e_images: dict[str, str], tmp_path: Path
) -> None:
    kubectl = real_cluster.kubectl
    components = real_cluster.all_components()

    def until(check: Any, what: str, timeout: float = 240) -> None:
        wait_until(check, what=what, timeout=timeout, components=components, interval=2.0)

    def get(*args: str) -> Any:
        return json.loads(kubectl("get", *args, "-o", "json"))

    # -- prerequisites: a default StorageClass and its volumes; simulated GPUs on each node --
    kubectl("apply", "-f", "-", stdin=STORAGE)
    for index in range(3):
        directory = tmp_path / f"alertmanager-{index}"
        directory.mkdir(mode=0o777)
        directory.chmod(0o777)
        kubectl("apply", "-f", "-", stdin=json.dumps(persistent_volume(f"am-{index}", directory)))
    for node in real_cluster.real_nodes:
        node.host_path("/run/tensor-fusion").joinpath("simulated-gpus.yaml").write_text(
            simulation(node.name)
        )
        standin = node.host_path("/run/tensor-fusion").joinpath("mps-standin")
        standin.mkdir(parents=True, exist_ok=True)
        script = standin / "nvidia-cuda-mps-control"
        script.write_text("#!/usr/bin/env python3\n" + MPS_CONTROL.read_text())
        script.chmod(0o755)

    # -- step 1 and 2: the overlay and my-values ----------------------------------------------
    values = my_values(tmp_path / "my-values.yaml", e2e_images)
    real_cluster.helm(
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "-f",
        str(CHART / "values-production.yaml"),
        "-f",
        str(values),
    )

    # The pool's agent template reads the simulated GPUs; then the nodes become GPU nodes.
    cluster = get("tensorfusioncluster", "tensor-fusion")
    template = cluster["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["hypervisor"]
    container = template["podTemplate"]["template"]["spec"]["containers"][0]
    container["env"] = [
        *container.get("env", []),
        {"name": "TF_SIMULATED_GPUS", "value": SIMULATED},
        {"name": "TF_MPS", "value": "on"},
        {"name": "TF_MPS_CONTROL", "value": MPS_STANDIN},
    ]
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=e2e",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": cluster["apiVersion"],
                "kind": cluster["kind"],
                "metadata": {"name": "tensor-fusion"},
                "spec": cluster["spec"],
            }
        ),
    )
    kubectl("label", "node", *(n.name for n in real_cluster.real_nodes), f"{GPU_LABEL}=true")

    # -- verify: 2 controller pods on different nodes, 3 Alertmanager pods, all Running -------
    def running_pods(selector: str) -> list[dict[str, Any]]:
        pods = get("pods", "-n", NAMESPACE, "-l", selector)["items"]
        return [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
        ]

    def controllers_up() -> bool:
        pods = running_pods("tensor-fusion.ai/component=operator")
        return len(pods) == 2 and len({p["spec"]["nodeName"] for p in pods}) == 2

    until(controllers_up, "2 controller pods Running and Ready on different nodes", timeout=300)
    until(
        lambda: len(running_pods("app.kubernetes.io/component=alert-manager")) == 3,
        "3 Alertmanager pods Running and Ready",
    )

    # -- the cluster and its pools Running; GPU nodes and GPUs discovered -----------------------
    def discovered() -> bool:
        phases = [
            item["status"].get("phase")
            for kind in ("tensorfusioncluster", "gpupool")
            for item in get(kind)["items"]
        ]
        gpus = get("gpu")["items"]
        nodes = get("gpunode")["items"]
        return (
            set(phases) == {"Running"}
            and len(nodes) == 2
            and len(gpus) == 4
            and {g["status"].get("phase") for g in gpus} == {"Running"}
        )

    until(discovered, "the cluster, pool, 2 GPU nodes and 4 GPUs Running", timeout=300)

    # -- GPU isolation: the agents' MPS daemons Running ------------------------------------------
    def mps_running() -> bool:
        states = [(n["status"].get("hypervisorStatus") or {}).get("mps", {}).get("state")
                  for n in get("gpunode")["items"]]  # fmt: skip
        return states == ["Running", "Running"]

    until(mps_running, "each agent's MPS daemon Running in its GPUNode status")

    # -- the controller's logs: no errors (the kubelet serves them) ------------------------------
    logs = kubectl(
        "logs", "-n", NAMESPACE, f"deploy/{RELEASE}-controller", "-c", "controller", "--tail=100"
    )
    assert logs.strip(), "no controller log lines"
    errors = [line for line in logs.splitlines() if " ERROR " in line]
    assert not errors, errors[:5]

    # -- the guide's step-5 Deployment: 2 of 3 replicas on TensorFusion ---------------------------
    kubectl("apply", "-f", "-", stdin=json.dumps(guide_deployment(e2e_images["hypervisor"])))

    def guide_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pods = get("pods", "-n", "default", "-l", "app=guide")["items"]
        ours = [p for p in pods if p["spec"].get("schedulerName") == "tensor-fusion-scheduler"]
        return ours, [p for p in pods if p not in ours]

    def guide_running() -> bool:
        ours, native = guide_pods()
        running = [p for p in ours if p["status"].get("phase") == "Running"]
        return len(running) == 2 and len(native) == 1

    until(guide_running, "2 TensorFusion replicas of the guide's Deployment Running")
    ours, native = guide_pods()
    for pod in ours:
        assert pod["spec"]["nodeName"] in {n.name for n in real_cluster.real_nodes}
        assert pod["metadata"]["annotations"].get("tensor-fusion.ai/gpupool")
    assert native[0]["status"].get("phase") == "Pending"  # nvidia.com/gpu: no node has one

    # -- a worker gets the MPS variables of its limits and the daemon's directories -------------
    kubectl(
        "apply", "-f", "-", stdin=json.dumps(mps_worker("mps-worker", e2e_images["hypervisor"]))
    )

    def mps_worker_ran() -> bool:
        pod = get("pod", "-n", "default", "mps-worker")
        return bool(pod["status"].get("phase") == "Running") and "listed" in kubectl(
            "logs", "-n", "default", "mps-worker")  # fmt: skip

    until(mps_worker_ran, "the MPS worker Running with its environment printed")
    printed = kubectl("logs", "-n", "default", "mps-worker")
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in printed, printed
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3072MB" in printed, printed  # vram-limit 3Gi
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in printed, printed  # soft: memory only
    assert "entry control" in printed, printed  # the daemon's socket in its pipe directory

    # -- the active controller pod deleted: TensorFusion pods still admitted and scheduled ------
    lease = get("lease", "-n", NAMESPACE, LEASE_NAME)
    holder = lease["spec"]["holderIdentity"]
    kubectl("delete", "pod", "-n", NAMESPACE, holder, "--wait=false")
    kubectl(
        "apply", "-f", "-", stdin=json.dumps(tf_pod("after-failover", e2e_images["hypervisor"]))
    )

    def admitted_and_running() -> bool:
        pod = get("pod", "-n", "default", "after-failover")
        return bool(
            pod["spec"].get("schedulerName") == "tensor-fusion-scheduler"
            and pod["status"].get("phase") == "Running"
        )

    until(admitted_and_running, "a TensorFusion pod admitted and Running after the failover")

    def moved() -> bool:
        return bool(get("lease", "-n", NAMESPACE, LEASE_NAME)["spec"]["holderIdentity"] != holder)

    until(moved, "the other replica holding the Lease")
    until(controllers_up, "the deleted controller pod replaced", timeout=300)


def tf_annotations() -> dict[str, str]:
    return {
        "tensor-fusion.ai/tflops-request": "100",
        "tensor-fusion.ai/tflops-limit": "200",
        "tensor-fusion.ai/vram-request": "3Gi",
        "tensor-fusion.ai/vram-limit": "3Gi",
    }


def guide_deployment(image: str) -> dict[str, Any]:
    """The guide's step-5 Deployment, three replicas: two on TensorFusion, one keeping
    nvidia.com/gpu (no CPU and memory requests: the nodes have two cores)."""
    annotations = {"tensor-fusion.ai/enabled-replicas": "2", **tf_annotations()}
    container = {
        "name": "python",
        "image": image,
        "command": ["sleep", "infinity"],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "guide", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "guide"}},
            "template": {
                "metadata": {
                    "labels": {"app": "guide", "tensor-fusion.ai/enabled": "true"},
                    "annotations": annotations,
                },
                "spec": {"containers": [container]},
            },
        },
    }


def tf_pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": tf_annotations(),
            "labels": {"tensor-fusion.ai/enabled": "true"},
        },
        "spec": {"containers": [{"name": "c", "image": image, "command": ["sleep", "infinity"]}]},
    }


def mps_worker(name: str, image: str) -> dict[str, Any]:
    """A soft-isolation worker that prints its MPS variables and its pipe directory."""
    script = ("env | grep ^CUDA_MPS_ | sort; for f in /tmp/nvidia-mps/*; do "
              'echo "entry $(basename $f)"; done; echo listed; sleep infinity')  # fmt: skip
    pod = tf_pod(name, image)
    pod["metadata"]["annotations"]["tensor-fusion.ai/isolation"] = "soft"
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    return pod
