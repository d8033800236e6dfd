"""One-shot probe of the node agent's NVML provider on a machine with NVIDIA GPUs.

    .venv/bin/python bench/nvml_probe.py [--samples 2] [--interval 1.0]

Prints one JSON document: the driver version, the inventory (with the FP16 TFLOPS the packaged
GPU-info catalogue gives each model), the time discovery took, and `--samples` samples taken
`--interval` seconds apart (NVLink throughput needs two). When NVML is missing or failing it
prints the provider's message on stderr and exits 1. Record what it finds in docs/hypervisor.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from tensorfusion.adapters.devices.gpu_catalogue import load_gpu_catalogue
from tensorfusion.adapters.devices.nvml import NvmlProvider, load_pynvml, text_of
from tensorfusion.domain.devices.inventory import DeviceInfo, ProviderError
from tensorfusion.domain.devices.tflops import TflopsLookup, lookup_tflops


def _driver_version(nvml: Any) -> str:
    try:
        return text_of(nvml.nvmlSystemGetDriverVersion())
    except Exception as exc:  # a probe reports what it can
        return f"unknown ({exc})"


def _device(device: DeviceInfo, found: TflopsLookup) -> dict[str, Any]:
    return {
        **dataclasses.asdict(device),
        "tflops": str(found.tflops),
        "catalogueModel": found.model,
    }


def probe(samples: int, interval_s: float) -> dict[str, Any]:
    """Discover, then sample; ProviderError when NVML cannot."""
    nvml = load_pynvml()
    provider = NvmlProvider(nvml)
    try:
        started = time.perf_counter()
        inventory = provider.discover()
        discovery_ms = (time.perf_counter() - started) * 1000
        catalogue = load_gpu_catalogue()
        taken = []
        for i in range(samples):
            if i:
                time.sleep(interval_s)
            started = time.perf_counter()
            rows = provider.sample(time.time())
            taken.append(
                {
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                    "gpus": [dataclasses.asdict(row) for row in rows],
                }
            )
        return {
            "driverVersion": _driver_version(nvml),
            "discoveryMs": round(discovery_ms, 2),
            "node": dataclasses.asdict(inventory.node),
            "devices": [
                _device(device, lookup_tflops(device.model, [], catalogue))
                for device in inventory.devices
            ],
            "samples": taken,
        }
    finally:
        provider.close()


def main() -> int:
    """Run the probe and print JSON; 1 with the message when NVML is not usable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    try:
        result = probe(max(args.samples, 1), args.interval)
    except ProviderError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
