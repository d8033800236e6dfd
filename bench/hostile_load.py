"""Hostile-load benchmark: the leader's event loop lag with and without issue 22's finding 4.

A real control plane (etcd, kube-apiserver, kube-controller-manager of `make testenv`) and one
`tensor-fusion controller` that leads, with fake GPU nodes whose agents registered their GPUs
and beat (tests/security/eventloop_load.py, the setup of the cluster test). Two phases in the
same run, each a bounded number of rounds for a bounded time:

- idle: no request at all (the loop's own work: informer events of the heartbeats, reconciles);
- valid: valid requests only (4 guide-pod simulations and 4 `GET /api/allocation` at once);
- hostile: the same with 12 deeply nested 10 KB bodies and 12 max-size (just under 1 MiB, YAML)
  simulations at once, round after round.

Measured from the controller's own figures (`tf_controller_event_loop_lag_seconds`, how late
the loop wakes a task that sleeps 0.1 s; `..._max_seconds`, the highest of the last 10 s): the
lag's quantiles per phase (bucket bounds) and the highest lag seen; with the answers by status
and whether the Lease stayed with the leader.

Run: `python bench/hostile_load.py` (about 2 minutes; needs `make testenv`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from lightkube import AsyncClient, KubeConfig
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.controller_replicas import Replica
from tests.cluster.controlplane import Binaries, ControlPlane
from tests.security.eventloop_load import LeaseWatch, hostile_round, leader_with_gpus

from benchmark_doc import write_section

LAG = "tf_controller_event_loop_lag_seconds"
LAG_MAX = "tf_controller_event_loop_lag_max_seconds"


@dataclass
class Phase:
    """One phase's figures."""

    name: str
    seconds: float = 0.0
    rounds: int = 0
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    buckets: dict[float, float] = field(default_factory=dict)
    """Wake-ups per lag bucket (upper bound, seconds) during the phase."""
    highest: float = 0.0
    holders: set[str | None] = field(default_factory=set)
    renewals: int = 0

    def quantile(self, q: float) -> float:
        """The bucket bound under which a share `q` of the wake-ups fell."""
        total = sum(self.buckets.values())
        running = 0.0
        for bound in sorted(self.buckets):
            running += self.buckets[bound]
            if total and running >= q * total:
                return bound
        return float("inf")


async def lag_figures(replica: Replica) -> tuple[dict[float, float], float]:
    """The lag histogram's cumulative bucket counts and the highest lag of the last 10 s."""
    _, text = await replica.get("/metrics", metrics=True)
    buckets: dict[float, float] = {}
    highest = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{LAG}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name == LAG_MAX:
                highest = sample.value
    return buckets, highest


def per_bucket(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    """Wake-ups per bucket between two scrapes of the cumulative histogram."""
    counts, previous = {}, 0.0
    for bound in sorted(after):
        cumulative = after[bound] - before.get(bound, 0.0)
        counts[bound] = cumulative - previous
        previous = cumulative
    return counts


async def run_phase(
    phase: Phase, leader: Replica, kube: AsyncClient, namespace: str, *, hostile: int | None,
    seconds: float, max_rounds: int,
) -> None:  # fmt: skip
    base = leader.url("").rstrip("/")
    before, _ = await lag_figures(leader)
    watch = LeaseWatch(kube, namespace)
    started = time.monotonic()
    end = started + seconds
    watching = asyncio.create_task(watch.run(end))
    highest = 0.0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        while hostile is not None and time.monotonic() < end and phase.rounds < max_rounds:
            counts = await hostile_round(session, base, hostile=hostile)
            phase.rounds += 1
            for kind, statuses in counts.items():
                phase.statuses.setdefault(kind, Counter()).update(statuses)
            highest = max(highest, (await lag_figures(leader))[1])
    await watching
    phase.seconds = time.monotonic() - started
    after, last = await lag_figures(leader)
    phase.buckets = per_bucket(before, after)
    phase.highest = max(highest, last)
    phase.holders = set(watch.holders)
    phase.renewals = len(watch.renewals)


def ms(seconds: float) -> str:
    return "> 10 s" if seconds == float("inf") else f"{seconds * 1000:g} ms"


def report(phases: list[Phase], nodes: int, gpus: int) -> str:
    rows = [
        "## Event loop under hostile load (`bench/hostile_load.py`)",
        "",
        f"A real control plane, one leading controller, {nodes} fake GPU nodes × {gpus} GPUs. "
        "Idle: no request. Valid: 4 guide-pod simulations and 4 `GET /api/allocation` at once, "
        "round after round. Hostile: the same with 12 deeply nested 10 KB YAML bodies and "
        "12 max-size (just under 1 MiB YAML) simulations at once (issue 22, finding 4). "
        "Lag: how late the controller's loop wakes a task that sleeps 0.1 s (its "
        "`tf_controller_event_loop_lag_*` figures; quantiles are histogram bucket bounds). "
        "The Lease's renew deadline is 10 s.",
        "",
        "| phase | rounds (s) | lag p50 | lag p99 | highest lag | Lease | answers |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        answers = "; ".join(
            f"{kind} " + ", ".join(f"{s}×{n}" for s, n in sorted(statuses.items()))
            for kind, statuses in p.statuses.items()
        )
        lease = (
            f"kept ({p.renewals} renewals seen)"
            if p.holders == {"eventloop-leader"}
            else f"LOST: {p.holders}"
        )
        rows.append(
            f"| {p.name} | {p.rounds} ({p.seconds:.0f} s) | {ms(p.quantile(0.5))} | "
            f"{ms(p.quantile(0.99))} | {p.highest * 1000:.0f} ms | {lease} | {answers} |"
        )
    return "\n".join(rows)


async def run(nodes: int, gpus: int, seconds: float, max_rounds: int) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="tf-bench-hostile-"))
    plane = ControlPlane(Binaries.locate(), workdir / "plane")
    plane.start()
    kube = AsyncClient(KubeConfig.from_file(plane.kubeconfig))
    try:
        began = time.monotonic()
        async with leader_with_gpus(plane, kube, workdir, nodes=nodes,
                                    gpus_per_node=gpus) as (leader, namespace):  # fmt: skip
            print(f"leader ready with {nodes} nodes in {time.monotonic() - began:.0f} s",
                  flush=True)  # fmt: skip
            phases = [Phase("idle"), Phase("valid"), Phase("hostile")]
            for phase, hostile in zip(phases, (None, 0, 12), strict=True):
                await run_phase(phase, leader, kube, namespace, hostile=hostile,
                                seconds=seconds, max_rounds=max_rounds)  # fmt: skip
                print(f"{phase.name}: {phase.rounds} rounds, highest lag "
                      f"{phase.highest * 1000:.0f} ms", flush=True)  # fmt: skip
            leader.component.ensure_running()
        return report(phases, nodes, gpus)
    finally:
        await kube.close()
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--max-rounds", type=int, default=30, help="rounds per phase at most")
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    args = parser.parse_args()
    section = asyncio.run(run(args.nodes, args.gpus_per_node, args.seconds, args.max_rounds))
    print(section)
    if not args.no_write:
        write_section("hostile-load", section)


if __name__ == "__main__":
    main()
