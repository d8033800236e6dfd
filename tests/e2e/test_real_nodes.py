"""The real-node cluster itself: pods run on both nodes, reach each other through a Service by
its DNS name, and `kubectl logs` reads a container's output through the kubelet."""

from __future__ import annotations

import json

from tensorfusion.devenv.processes import wait_until
from tensorfusion.devenv.real_nodes.cluster import RealNodeCluster

SERVER = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: echo}}
      containers:
        - name: echo
          image: IMAGE
          command: [python, -m, http.server, "8080"]
          readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
"""

CLIENT = """
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  restartPolicy: Never
  nodeName: NODE
  containers:
    - name: client
      image: IMAGE
      command:
        - python
        - -c
        - |
          import socket, time, urllib.request
          name = "echo.default.svc.cluster.local"
          print("resolved", socket.gethostbyname(name))
          # kube-proxy programs the Service's endpoints a moment after the pods turn Ready;
          # until then it rejects connections, so the first request is retried with a deadline.
          deadline = time.monotonic() + 60
          while True:
              try:
                  urllib.request.urlopen(f"http://{name}/", timeout=10)
                  break
              except OSError as error:
                  if time.monotonic() > deadline:
                      raise
                  print("waiting for endpoints:", error)
                  time.sleep(0.5)
          for _ in range(4):
              print("status", urllib.request.urlopen(f"http://{name}/", timeout=10).status)
"""


def test_pods_on_both_nodes_reach_a_service_by_name_and_their_logs_are_read(
    real_cluster: RealNodeCluster, e2e_images: dict[str, str]
) -> None:
    image = e2e_images["hypervisor"]
    real_cluster.kubectl("apply", "-f", "-", stdin=SERVER.replace("IMAGE", image))
    components = real_cluster.all_components()

    def ready_on_both() -> bool:
        pods = json.loads(real_cluster.kubectl("get", "pods", "-l", "app=echo", "-o", "json"))
        ready = {
            pod["spec"].get("nodeName")
            for pod in pods["items"]
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in pod.get("status", {}).get("conditions", []))
        }  # fmt: skip
        return ready == {"node-a", "node-b"}

    wait_until(ready_on_both, what="an echo pod Ready on each node", timeout=180,
               components=components, interval=1.0)  # fmt: skip

    client = CLIENT.replace("IMAGE", image).replace("NODE", "node-a")
    real_cluster.kubectl("apply", "-f", "-", stdin=client)

    def finished() -> str | None:
        phase = real_cluster.kubectl("get", "pod", "client", "-o", "jsonpath={.status.phase}")
        return phase if phase in ("Succeeded", "Failed") else None

    wait_until(lambda: finished() is not None, what="the client pod finished", timeout=180,
               components=components, interval=1.0)  # fmt: skip
    logs = real_cluster.kubectl("logs", "client")
    assert finished() == "Succeeded", logs
    service_ip = real_cluster.kubectl("get", "service", "echo", "-o", "jsonpath={.spec.clusterIP}")
    assert f"resolved {service_ip}" in logs
    assert logs.count("status 200") == 4
