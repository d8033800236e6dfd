"""`tensor-fusion dev up` as a user runs it: the real CLI in a fresh directory, then the
production guide's commands against what it prints, then `dev down`.

Checked: every GPU node and GPU Running (`kubectl get gpunode,gpu`); a second `dev up` exits 1
naming the running one; a broken cluster file exits 2 naming the field; the guide's step-5
Deployment scheduled with GPUs and its pods Running; the workers' usage reaching the metrics
tables (an alert rule of the `--values` file over `tf_worker_usage` fires for them); the guide's
simulate-schedule on the controller API; a controller killed with SIGKILL restarted; `dev
status` and `dev logs`; `dev down` leaving no process of its sessions and no port in use.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tensorfusion.devenv.processes import session_processes
from tensorfusion.devenv.source_tree import EXECUTABLE, SOURCE_DIR
from tensorfusion.devenv.state_dir import DevDirectory
from tensorfusion.runtime.leader_election import LEASE_NAME

from .controlplane import Binaries, eventually

pytestmark = pytest.mark.cluster

EXAMPLES = SOURCE_DIR / "examples"
BUSY_WORKERS_RULE = {
    "name": "WorkerBusy",
    "query": "SELECT worker, avg(compute_percentage) AS compute FROM tf_worker_usage\n"
    "WHERE compute_percentage > {{ .Threshold }} AND {{ .Conditions }}\nGROUP BY worker\n",
    "threshold": 1,
    "evaluationInterval": "30s",  # the window: 3 of the agents' 10 s cycles
    "consecutiveCount": 1,
    "severity": "P2",
    "summary": "{{ .worker }} uses {{ .compute }}% of a GPU",
    "alertTargetInstance": "{{ .worker }}",
}


def dev(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`tensor-fusion dev ARGS` as a user types it."""
    return subprocess.run([str(EXECUTABLE), "dev", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def kubectl(kubeconfig: str, *args: str) -> str:
    binary = Binaries.locate().path("kubectl")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def listening(endpoint: str) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


async def leader_alerts(state: dict[str, Any]) -> dict[str, Any] | None:
    """`/api/alerts` of the replica whose evaluator runs (the leader)."""
    async with aiohttp.ClientSession() as session:
        for name, info in state["components"].items():
            if "-controller-" not in name or not info["address"]:
                continue
            try:
                async with session.get(info["address"] + "/api/alerts",
                                       timeout=aiohttp.ClientTimeout(5)) as reply:  # fmt: skip
                    body: dict[str, Any] = await reply.json()
            except (aiohttp.ClientError, TimeoutError):
                continue
            if body.get("running"):
                return body
    return None


async def test_dev_up_runs_the_guide_and_dev_down_leaves_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "dev"
    values = tmp_path / "my-values.yaml"
    values.write_text(yaml.safe_dump({"dynamicConfig": {"alertRules": [BUSY_WORKERS_RULE]}}))
    state_dir = DevDirectory(directory)
    try:
        up = dev("up", "--dir", str(directory), "--values", str(values))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Ready in" in up.stdout and "export KUBECONFIG=" in up.stdout, up.stdout
        state: dict[str, Any] = json.loads(state_dir.state_file.read_text())
        kubeconfig = state["kubeconfig"]
        assert up.stdout.count(kubeconfig) == 1
        printed = " ".join(up.stdout.split())
        assert f"export PATH={Binaries.locate().directory}:$PATH" in printed, up.stdout
        assert "tensor-fusion dev down, then tensor-fusion dev up --values FILE" in printed

        # -- kubectl get gpunode,gpu: 4 nodes, 32 GPUs, all Running ------------------------
        shown = kubectl(kubeconfig, "get", "gpunode,gpu", "--no-headers")
        phases = [line.split()[1] for line in shown.splitlines()]
        assert len(phases) == 4 + 32 and set(phases) == {"Running"}, shown

        # -- the guide's Verify: 3 Alertmanager pods Running and Ready (stand-ins) -----------
        shown = kubectl(kubeconfig, "get", "pods", "-n", "tensor-fusion-sys", "--no-headers",
                        "-l", "app.kubernetes.io/component=alert-manager")  # fmt: skip
        rows = sorted(line.split()[:3] for line in shown.splitlines())
        assert rows == [[f"tensor-fusion-sys-alert-manager-{i}", "1/1", "Running"]
                        for i in range(3)], shown  # fmt: skip

        # -- a second dev up exits 1 naming the running one; a broken file exits 2 ---------
        again = dev("up", "--dir", str(directory), timeout=60)
        assert again.returncode == 1
        assert f"already runs in {directory}" in " ".join(again.stderr.split()), again.stderr
        broken = tmp_path / "broken.yaml"
        example = (EXAMPLES / "cluster.yaml").read_text()
        broken.write_text(example.replace("count: 8", "count: many", 1))
        bad = dev("up", "--dir", str(tmp_path / "other"), "--cluster", str(broken), timeout=60)
        assert bad.returncode == 2
        assert "nodes[0].gpus.count: invalid value 'many'" in " ".join(bad.stderr.split())
        assert not (tmp_path / "other" / "pids").exists()

        # -- the guide's simulate-schedule on the controller API ----------------------------
        async with (
            aiohttp.ClientSession() as session,
            session.post(state["controller_api"] + "/api/simulate-schedule",
                         data=(EXAMPLES / "dev" / "pod.yaml").read_bytes(),
                         headers={"Content-Type": "application/yaml"}) as reply,
        ):  # fmt: skip
            decision = await reply.json()
        assert reply.status == 200 and decision["result"]["schedulable"], decision

        # -- the guide's step 5: 10 replicas, 3 on TensorFusion, all Running --------------
        kubectl(kubeconfig, "apply", "-f", str(EXAMPLES / "dev" / "deployment.yaml"))

        async def deployment_running() -> list[dict[str, Any]] | None:
            pods = json.loads(kubectl(kubeconfig, "get", "pods", "-n", "default", "-o", "json"))
            items: list[dict[str, Any]] = pods["items"]
            running = [p for p in items if p["status"].get("phase") == "Running"]
            return items if len(items) == 10 and len(running) == 10 else None

        pods = await eventually(deployment_running, what="the guide's 10 pods Running",
                                timeout=120)  # fmt: skip
        workers = [
            p["metadata"]["name"]
            for p in pods
            if (p["metadata"].get("annotations") or {}).get("tensor-fusion.ai/gpu-ids")
        ]
        assert len(workers) == 3, [p["metadata"].get("annotations") for p in pods]
        # the scheduler's PodScheduled stays beside the supervisor's conditions, so
        # `kubectl wait --for=condition=PodScheduled` returns
        for pod in pods:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
            assert conditions.get("PodScheduled") == "True", (pod["metadata"]["name"], conditions)
            assert conditions.get("Ready") == "True", (pod["metadata"]["name"], conditions)
        kubectl(kubeconfig, "wait", "--for=condition=PodScheduled", "pods", "--all",
                "-n", "default", "--timeout=30s")  # fmt: skip

        # -- their usage reaches tf_worker_usage: the --values rule fires for each ---------
        async def busy_workers() -> set[str] | None:
            body = await leader_alerts(state)
            if body is None:
                return None
            [rule] = [r for r in body["rules"] if r["name"] == "WorkerBusy"]
            firing = {entry["labels"].get("worker", "") for entry in rule["firing"]}
            return firing if firing >= set(workers) else None

        await eventually(busy_workers, what="WorkerBusy firing for the 3 workers", timeout=120)

        async def in_alertmanager() -> set[str] | None:
            async with (
                aiohttp.ClientSession() as session,
                session.get(state["alertmanagers"][0] + "/api/v2/alerts") as reply,
            ):
                alerts = await reply.json()
            found = {a["labels"].get("worker", "") for a in alerts
                     if a["labels"].get("alertname") == "WorkerBusy"}  # fmt: skip
            return found if found >= set(workers) else None

        assert state["alertmanagers"], "Debian's prometheus-alertmanager (make system-deps)"
        await eventually(in_alertmanager, what="WorkerBusy in the real Alertmanager", timeout=60)

        # -- a controller killed with SIGKILL is restarted ---------------------------------
        victim = "tensor-fusion-sys-controller-0"
        old_pid = state["components"][victim]["pid"]
        os.kill(old_pid, signal.SIGKILL)

        async def restarted() -> int | None:
            now = state_dir.read_state()
            info = now.components.get(victim) if now else None
            pid = info.pid if info else None
            return pid if pid and pid != old_pid else None

        await eventually(restarted, what=f"{victim} restarted", timeout=60)
        status = dev("status", "--dir", str(directory), timeout=60)
        assert status.returncode == 0, status.stdout
        logs = dev("logs", victim, "--dir", str(directory), timeout=60)
        assert logs.returncode == 0 and logs.stdout.strip(), logs.stderr

        # -- the guide: delete the active controller Pod; a new pod replaces it -------------
        def controller_pods() -> set[str]:
            shown = kubectl(kubeconfig, "get", "pods", "-n", "tensor-fusion-sys", "-o", "name",
                            "-l", "tensor-fusion.ai/stand-in=controller-replica")  # fmt: skip
            return {line.removeprefix("pod/") for line in shown.split()}

        def holder() -> str:
            return kubectl(kubeconfig, "get", "lease", LEASE_NAME, "-n", "tensor-fusion-sys",
                           "-o", "jsonpath={.spec.holderIdentity}")  # fmt: skip

        active = holder()
        assert active in controller_pods(), (active, controller_pods())
        kubectl(kubeconfig, "delete", "pod", "-n", "tensor-fusion-sys", active)

        async def replaced() -> set[str] | None:
            pods = controller_pods()
            return pods if len(pods) == 2 and active not in pods and holder() in pods else None

        before = await eventually(replaced, what=f"{active} replaced, the Lease on a pod",
                                  timeout=120)  # fmt: skip

        # -- kubectl rollout restart (the guide's step 6): both replicas replaced -----------
        kubectl(kubeconfig, "rollout", "restart", "deploy/tensor-fusion-sys-controller",
                "-n", "tensor-fusion-sys")  # fmt: skip

        async def restarted_all() -> set[str] | None:
            pods = controller_pods()
            return pods if len(pods) == 2 and not pods & before else None

        await eventually(restarted_all, what="both controller pods replaced", timeout=120)
    finally:
        final = state_dir.read_state()
        sessions = {name: info.pid for name, info in (final.components if final else {}).items()}
        supervisor = state_dir.supervisor()
        endpoints = state_dir.read_ports()
        down = dev("down", "--dir", str(directory), timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert supervisor is not None
    sessions["supervisor"] = supervisor
    left = {name: session_processes(pid) for name, pid in sessions.items() if pid}
    assert not any(left.values()), left
    assert endpoints and not [e for e in endpoints.values() if listening(e)]
    assert not list((directory / "pids").glob("*.pid"))
    assert dev("status", "--dir", str(directory), timeout=60).returncode == 1
