"""`tensor-fusion controller` replicas against the real API server: start-up errors, one
leader, recovery, takeover after `kill -9`, and a replica that loses the Lease exits non-zero."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from tensorfusion.runtime.leader_election import LEASE_NAME

from .controlplane import Component, ControlPlane, eventually

pytestmark = pytest.mark.cluster

CRDS = Path(__file__).resolve().parents[2] / "charts" / "tensor-fusion" / "crds"
EXECUTABLE = Path(sys.executable).with_name("tensor-fusion")


async def install_crds(control_plane: ControlPlane) -> None:
    await control_plane.kubectl("apply", "--server-side", "-f", str(CRDS))
    await control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"
    )


Start = Callable[..., Component]


@pytest.fixture
def replicas(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Start]:
    """Starts controller replicas in the test namespace; stops them afterwards."""
    started: list[Component] = []

    def start(name: str, *flags: str) -> Component:
        replica = Component(
            name,
            [EXECUTABLE, "controller", "--kubeconfig", str(control_plane.kubeconfig), *flags],
            tmp_path / f"{name}.log",
            env={
                "POD_NAME": name,
                "POD_IP": f"10.0.0.{len(started) + 1}",
                "OPERATOR_NAMESPACE": namespace,
            },
        )
        replica.start()
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


async def holder(kube: AsyncClient, namespace: str) -> str | None:
    try:
        lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    except Exception:
        return None
    return lease.spec.holderIdentity if lease.spec else None


async def test_an_unknown_flag_exits_2_with_one_line(control_plane: ControlPlane) -> None:
    component = Component(
        "bad-flag", [EXECUTABLE, "controller", "-leader-elekt"], control_plane.workdir / "bad.log"
    )
    component.start()

    async def exited() -> int | None:
        return component.exit_code

    assert await eventually(exited, what="the controller to exit") == 2
    log = component.log_path.read_text()
    assert "unknown flag -leader-elekt; valid flags: -agent-readiness" in log
    assert "Traceback" not in log


async def test_one_leader_and_a_takeover_after_kill_9(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, replicas: Start
) -> None:
    await install_crds(control_plane)
    first = replicas("replica-a", "-leader-elect")

    async def led_by_first() -> bool:
        return await holder(kube, namespace) == "replica-a"

    await eventually(led_by_first, what="replica-a to lead", components=[first])
    second = replicas("replica-b", "-leader-elect")

    async def recovered() -> bool:
        return "allocator recovered" in first.log_path.read_text()

    await eventually(recovered, what="replica-a to recover the allocator", components=[first])
    first.kill()

    async def led_by_second() -> bool:
        return await holder(kube, namespace) == "replica-b"

    # The Lease lasts 15 s: replica-b takes it at most one retry period (with jitter) later.
    await eventually(led_by_second, what="replica-b to take over within 20 s", timeout=20,
                     components=[second])  # fmt: skip
    assert second.exit_code is None
    assert "allocator recovered" in second.log_path.read_text()


async def test_a_replica_that_loses_the_lease_exits_1(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, replicas: Start
) -> None:
    await install_crds(control_plane)
    leader = replicas("replica-c", "-leader-elect")

    async def leads() -> bool:
        return await holder(kube, namespace) == "replica-c"

    await eventually(leads, what="replica-c to lead", components=[leader])
    lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    assert lease.spec is not None
    lease.spec.holderIdentity = "someone-else"
    await kube.replace(lease)

    async def exited() -> int | None:
        return leader.exit_code

    assert await eventually(exited, what="replica-c to exit", timeout=30) == 1
    assert "leadership lost" in leader.log_path.read_text()
