"""The simulated GPU provider's file, parsed from its text into a `SimulationSpec`.

The caller reads the file; `parse_simulation(text, source, node_name)` checks it and raises one
`ProviderError` naming `source`, the field and the value on the first problem. The format
(`docs/hypervisor.md`, "Simulated GPU provider", has a full example)::

    node:                            # optional
      name: gpu-node-1               # seeds generated uuids; default: the agent's node name
      hostRAM: 512Gi                 # GPUNode status.nodeInfo; default 0
      dataDisk: 2Ti                  # default 0
    gpus:                            # required; GPUs are indexed in order, 128 at most
      - model: NVIDIA H100 80GB HBM3 # product name, as NVML reports it (required)
        vram: 80Gi                   # total memory (required), rounded down to a whole MiB
        vendor: NVIDIA               # default NVIDIA
        count: 4                     # GPUs made from this entry, default 1
        uuid: GPU-...                # only with count 1; default from node name and index
        pciBusId: "00000000:19:00.0" # only with count 1 (quoted); default 00000000:<index+1>:00.0
        numaNode: 0                  # default -1 (unknown)
        usage: {...}                 # a constant, or a list of steps (below)
        workers:                     # worker pod name → its usage of each GPU of the entry
          train-0: {...}             # a constant, or a list of steps
    nvlink:                          # optional
      - gpus: [0, 1, 2, 3]           # every pair of these GPU indices is linked
        links: 18                    # links per pair, default 1
        version: 4                   # NVLink generation 1-5, default 4
        bandwidthMBps: 900000        # per pair, default links × the generation's link bandwidth

A constant is a mapping of the fields below; a list of steps gives each step an `at` (seconds
from the provider's start: a number or a duration such as `30s`, increasing) and the fields
that change then; the others keep their previous values, which start at zero.

- GPU usage: `compute` (%, 0-100), `memoryUsed` (bytes or a quantity, at most `vram`),
  `temperature` (°C), `power` (W), `pcieRx`, `pcieTx`, `nvlinkRx`, `nvlinkTx` (KB/s),
  `graphicsClock`, `smClock`, `memoryClock`, `videoClock` (MHz), `errors` (device error texts:
  the agent reports itself Degraded while there are any). Independent of the workers' figures.
- Worker usage: `compute` (% of the whole GPU), `memoryUsed`, and limiter event rates per second
  `computeThrottledPerSecond`, `vramFreezedPerSecond`, `vramResumedPerSecond`; the counters the
  agent writes are these rates integrated from the start (rounded down), so they never go back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from tensorfusion.domain.devices.document_fields import DocumentFields, join, load_yaml
from tensorfusion.domain.devices.inventory import DeviceInfo, HostFacts, NVLinkPeer
from tensorfusion.domain.devices.nvlink import LINK_BANDWIDTH_MB_PER_S, nvlink_bandwidth_mb_per_s
from tensorfusion.domain.devices.simulation_steps import (
    GPU_FIELDS,
    WORKER_FIELDS,
    GpuLoad,
    Step,
    WorkerLoad,
    parse_steps,
)

__all__ = [
    "MAX_GPUS",
    "SimulatedGpu",
    "SimulatedWorker",
    "SimulationSpec",
    "parse_simulation",
    "simulated_uuid",
]

MAX_GPUS: Final = 128
_MIB: Final = 1 << 20
_DEFAULT_NODE: Final = "sim"
_TOP: Final = ("gpus", "node", "nvlink")
_NODE: Final = ("dataDisk", "hostRAM", "name")
_GPU: Final = (
    "count",
    "model",
    "numaNode",
    "pciBusId",
    "usage",
    "uuid",
    "vendor",
    "vram",
    "workers",
)
_NVLINK: Final = ("bandwidthMBps", "gpus", "links", "version")
_PCI_BUS_ID: Final = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_UUID: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class SimulatedWorker:
    """One worker pod's usage of one GPU over time."""

    name: str
    steps: tuple[Step[WorkerLoad], ...]


@dataclass(frozen=True, slots=True)
class SimulatedGpu:
    """One GPU: what discovery reports, and its usage and workers over time."""

    device: DeviceInfo
    usage: tuple[Step[GpuLoad], ...] = ()
    workers: tuple[SimulatedWorker, ...] = ()


@dataclass(frozen=True, slots=True)
class SimulationSpec:
    """A parsed simulated GPU file; `source` names it in messages and the provider's name."""

    source: str
    node: HostFacts
    gpus: tuple[SimulatedGpu, ...]


def simulated_uuid(node_name: str, index: int) -> str:
    """A stable NVML-style uuid (`GPU-xxxxxxxx-xxxx-...`) for GPU `index` of `node_name`."""
    digest = hashlib.sha256(f"{node_name}/{index}".encode()).hexdigest()
    parts = (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])
    return "GPU-" + "-".join(parts)


def parse_simulation(text: str, source: str, node_name: str = "") -> SimulationSpec:
    """Parse a simulated GPU file; `node_name` seeds uuids when the file names no node."""
    doc = DocumentFields(source)
    data = load_yaml(text, source)
    if not isinstance(data, Mapping):
        doc.fail("", "the file must be a mapping with `gpus` (and optional `node`, `nvlink`)", data)
    top = doc.mapping("", data, _TOP, required=("gpus",))
    node = doc.mapping("node", top.get("node", {}), _NODE)
    seed = doc.text("node.name", node["name"]) if "name" in node else node_name or _DEFAULT_NODE
    facts = HostFacts(
        host_ram_bytes=doc.byte_count("node.hostRAM", node.get("hostRAM", 0)),
        data_disk_bytes=doc.byte_count("node.dataDisk", node.get("dataDisk", 0)),
    )
    gpus = _gpus(doc, doc.sequence("gpus", top["gpus"], non_empty=True), seed)
    links = _nvlink(doc, doc.sequence("nvlink", top.get("nvlink", [])), gpus)
    return SimulationSpec(source=source, node=facts, gpus=_with_links(gpus, links))


def _gpus(doc: DocumentFields, entries: list[Any], seed: str) -> list[SimulatedGpu]:
    gpus: list[SimulatedGpu] = []
    uuids: dict[str, str] = {}
    buses: dict[str, str] = {}
    for i, raw in enumerate(entries):
        path = join("gpus", i)
        entry = doc.mapping(path, raw, _GPU, required=("model", "vram"))
        count = doc.integer(join(path, "count"), entry.get("count", 1), 1, MAX_GPUS)
        if len(gpus) + count > MAX_GPUS:
            doc.fail(join(path, "count"), f"more than {MAX_GPUS} GPUs in all", count)
        for key in ("uuid", "pciBusId"):
            if key in entry and count != 1:
                doc.problem(join(path, key), f"only allowed with count 1 (count is {count})")
        model = doc.text(join(path, "model"), entry["model"])
        vendor = doc.text(join(path, "vendor"), entry.get("vendor", "NVIDIA"))
        vram = doc.byte_count(join(path, "vram"), entry["vram"]) // _MIB * _MIB
        if vram == 0:
            doc.fail(join(path, "vram"), "must be at least 1Mi", entry["vram"])
        numa = doc.integer(join(path, "numaNode"), entry.get("numaNode", -1), -1, 1023)
        raw_usage = entry.get("usage", {})
        usage = parse_steps(doc, join(path, "usage"), raw_usage, GpuLoad(), GPU_FIELDS, vram)
        workers = _workers(doc, join(path, "workers"), entry.get("workers", {}), vram)
        for _ in range(count):
            index = len(gpus)
            uuid = _unique(doc, path, "uuid", entry, _UUID, uuids)
            bus = _unique(doc, path, "pciBusId", entry, _PCI_BUS_ID, buses)
            if not bus:
                bus = f"00000000:{index + 1:02X}:00.0"
                if _bus_key(bus) in buses:
                    doc.problem(
                        join(path, "pciBusId"),
                        f"the generated PCI bus id {bus} of GPU {index} is already used by "
                        f"{buses[_bus_key(bus)]}; give that GPU another pciBusId",
                    )
                buses[_bus_key(bus)] = f"GPU {index}"
            device = DeviceInfo(
                uuid=uuid or simulated_uuid(seed, index),
                index=index,
                model=model,
                vendor=vendor,
                vram_bytes=vram,
                numa_node=numa,
                pci_bus_id=bus,
            )
            gpus.append(SimulatedGpu(device=device, usage=usage, workers=workers))
    return gpus


_RULES: Final[dict[str, str]] = {
    _UUID.pattern: "must be usable as an object name once lower-cased: letters, digits, '-' and "
    "'.', starting and ending with a letter or digit",
    _PCI_BUS_ID.pattern: "must be a PCI bus id such as 00000000:19:00.0",
}


def _bus_key(bus: str) -> str:
    """A PCI bus id with its domain widened to 8 digits, lower-cased: one key per bus."""
    domain, _, rest = bus.partition(":")
    return f"{domain.rjust(8, '0')}:{rest}".lower()


def _unique(
    doc: DocumentFields,
    owner: str,
    key: str,
    entry: Mapping[str, Any],
    pattern: re.Pattern[str],
    seen: dict[str, str],
) -> str:
    """`entry[key]` when given: matching `pattern` and unique case-insensitively."""
    if key not in entry:
        return ""
    value, path = entry[key], join(owner, key)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        rule = _RULES[pattern.pattern]
        if isinstance(value, int | float) and not isinstance(value, bool):
            rule += " (quote it: YAML reads an unquoted 00000000:19:00.0 as a number)"
        doc.fail(path, rule, value)
    unique = _bus_key(value) if pattern is _PCI_BUS_ID else value.lower()
    if unique in seen:
        doc.fail(path, f"already used by {seen[unique]}", value)
    seen[unique] = owner
    return value


def _workers(doc: DocumentFields, path: str, value: Any, vram: int) -> tuple[SimulatedWorker, ...]:
    if not isinstance(value, Mapping):
        doc.fail(path, "must be a mapping of worker pod name to its usage", value)
    workers: list[SimulatedWorker] = []
    for name, usage in value.items():
        if not isinstance(name, str) or not name.strip():
            doc.fail(path, "worker names must be non-empty strings", name)
        steps = parse_steps(doc, join(path, name), usage, WorkerLoad(), WORKER_FIELDS, vram)
        workers.append(SimulatedWorker(name=name, steps=steps))
    return tuple(workers)


def _nvlink(
    doc: DocumentFields, groups: list[Any], gpus: list[SimulatedGpu]
) -> dict[int, list[tuple[int, NVLinkPeer]]]:
    """Per GPU index: (peer index, link) for every pair of every group."""
    linked: dict[tuple[int, int], int] = {}
    peers: dict[int, list[tuple[int, NVLinkPeer]]] = {}
    last = len(gpus) - 1
    for g, raw in enumerate(groups):
        path = join("nvlink", g)
        group = doc.mapping(path, raw, _NVLINK, required=("gpus",))
        members = doc.sequence(join(path, "gpus"), group["gpus"])
        where = join(path, "gpus")
        indices = [doc.integer(join(where, i), m, 0, last) for i, m in enumerate(members)]
        if len(indices) < 2 or len(set(indices)) != len(indices):
            doc.fail(where, "must list at least two different GPU indices", members)
        links = doc.integer(join(path, "links"), group.get("links", 1), 1, 64)
        top = max(LINK_BANDWIDTH_MB_PER_S)
        version = doc.integer(join(path, "version"), group.get("version", 4), 1, top)
        default_bandwidth = nvlink_bandwidth_mb_per_s(version, links)
        raw_bandwidth = group.get("bandwidthMBps", default_bandwidth)
        bandwidth = doc.integer(join(path, "bandwidthMBps"), raw_bandwidth, 1, 1 << 40)
        for a in indices:
            for b in indices:
                if a >= b:
                    continue
                if (a, b) in linked:
                    doc.fail(
                        where,
                        f"GPUs {a} and {b} are already linked by nvlink[{linked[a, b]}]",
                        members,
                    )
                linked[a, b] = g
                for one, other in ((a, b), (b, a)):
                    link = NVLinkPeer(gpus[other].device.pci_bus_id, links, version, bandwidth)
                    peers.setdefault(one, []).append((other, link))
    return peers


def _with_links(
    gpus: list[SimulatedGpu], peers: dict[int, list[tuple[int, NVLinkPeer]]]
) -> tuple[SimulatedGpu, ...]:
    result: list[SimulatedGpu] = []
    for index, gpu in enumerate(gpus):
        links = tuple(link for _, link in sorted(peers.get(index, []), key=lambda p: p[0]))
        result.append(replace(gpu, device=replace(gpu.device, nvlinks=links)))
    return tuple(result)
