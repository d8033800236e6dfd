"""Hardware check of GPU isolation through NVIDIA MPS (issue 27), for a machine with an NVIDIA
GPU, its driver and `nvidia-cuda-mps-control`; nothing else (ctypes on `libcuda.so.1`, the
agent's own NVML provider over `libnvidia-ml.so.1`). Run as root (compute modes):

    .venv/bin/python bench/gpu_isolation_probe.py [--memory-limit-mib 2048] [--out FILE]

It (a) discovers the GPUs with the agent's NVML provider and prints the GPU object status the
agent would write for each; (b) starts the MPS control daemon with the agent's supervisor on the
first GPU (EXCLUSIVE_PROCESS, restored at the end); (c) runs a client with the memory limit
the agent would give a soft worker of `--memory-limit-mib` and allocates 256 MiB chunks until
CUDA refuses, reporting where; (d) runs a spin kernel loaded from PTX text in a client without
an SM share and in one with the hard worker's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25`, timing
both (the second should take about four times as long). Every client's environment comes from
the same `client_env` as the agent's Allocate. One JSON document on stdout (and `--out`).
Exit 0 when every step ran, 1 when a step failed (its error is in the document), 2 when the
driver or NVML cannot be loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from tensorfusion.adapters.devices.gpu_catalogue import load_gpu_catalogue
from tensorfusion.adapters.devices.mps_control import MpsControl
from tensorfusion.adapters.devices.nvml import NvmlProvider
from tensorfusion.domain.devices.gpu_objects import AgentIdentity, gpu_status_patch
from tensorfusion.domain.devices.inventory import ProviderError
from tensorfusion.domain.devices.tflops import lookup_tflops
from tensorfusion.domain.isolation.mps_client import ClientLimits, client_env
from tensorfusion.domain.isolation.mps_daemon import MpsState, mps_protocol
from tensorfusion.domain.vocabulary import IsolationMode
from tensorfusion.hypervisor.mps_supervisor import MpsSupervisor

CHUNK: Final = 256 << 20
MAX_CHUNKS: Final = 4096
SPIN_CYCLES: Final = 500_000_000
THREADS_PER_BLOCK: Final = 256
BLOCKS_PER_SM: Final = 8
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: Final = 16
CLIENT_TIMEOUT_S: Final = 300.0
PTX: Final = """
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra LOOP;
    ret;
}
"""


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


def _cuda() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _check(cuda: Any, call: str, code: int) -> None:
    if code:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(code, ctypes.byref(name))
        raise CudaError(f"{call}: {(name.value or b'?').decode()} ({code})")


def _context(cuda: Any) -> ctypes.c_int:
    _check(cuda, "cuInit", cuda.cuInit(0))
    device = ctypes.c_int()
    _check(cuda, "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
    context = ctypes.c_void_p()
    _check(cuda, "cuDevicePrimaryCtxRetain",
           cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))  # fmt: skip
    _check(cuda, "cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
    return device


def client_alloc() -> dict[str, Any]:
    """In a client: allocate CHUNK after CHUNK until CUDA refuses."""
    cuda = _cuda()
    _context(cuda)
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    allocated, refusal = 0, ""
    for _ in range(MAX_CHUNKS):
        pointer = ctypes.c_uint64()
        code = cuda.cuMemAlloc_v2(ctypes.byref(pointer), CHUNK)
        if code:
            name = ctypes.c_char_p()
            cuda.cuGetErrorName(code, ctypes.byref(name))
            refusal = (name.value or b"?").decode()
            break
        allocated += CHUNK
    return {"allocated_mib": allocated >> 20, "refused_with": refusal}


def client_spin() -> dict[str, Any]:
    """In a client: time the spin kernel over every SM's worth of blocks."""
    cuda = _cuda()
    device = _context(cuda)
    sms = ctypes.c_int()
    _check(cuda, "cuDeviceGetAttribute", cuda.cuDeviceGetAttribute(
        ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))  # fmt: skip
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(cuda, "cuModuleLoadData",
           cuda.cuModuleLoadData(ctypes.byref(module), PTX.encode() + b"\0"))  # fmt: skip
    _check(cuda, "cuModuleGetFunction",
           cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"))  # fmt: skip
    cycles = ctypes.c_uint64(SPIN_CYCLES)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(cycles), ctypes.c_void_p))
    blocks = sms.value * BLOCKS_PER_SM
    started = time.perf_counter()
    _check(cuda, "cuLaunchKernel", cuda.cuLaunchKernel(
        function, blocks, 1, 1, THREADS_PER_BLOCK, 1, 1, 0, None, params, None))  # fmt: skip
    _check(cuda, "cuCtxSynchronize", cuda.cuCtxSynchronize())
    return {"sms": sms.value, "blocks": blocks,
            "kernel_ms": round((time.perf_counter() - started) * 1000, 1)}  # fmt: skip


def _run_client(kind: str, env: dict[str, str]) -> dict[str, Any]:
    process = subprocess.run(
        [sys.executable, __file__, "--client", kind], env={**os.environ, **env},
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False,
    )  # fmt: skip
    try:
        found: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        found = {"error": f"client exited {process.returncode}: {process.stderr.strip()[-500:]}"}
    found["env"] = {k: v for k, v in env.items() if k.startswith("CUDA_")}
    return found


def _discovery(provider: NvmlProvider) -> list[dict[str, Any]]:
    inventory = provider.discover()
    catalogue = load_gpu_catalogue()
    identity = AgentIdentity(node="probe", pool="probe", gpu_node_uid="probe")
    gpus = []
    for device in inventory.devices:
        found = lookup_tflops(device.model, (), catalogue, vendor=device.vendor)
        status = gpu_status_patch(identity, device, inventory.devices,
                                  tflops_milli=found.tflops_milli, gpu_model=found.model,
                                  current=None)  # fmt: skip
        gpus.append({"uuid": device.uuid, "status": status})
    return gpus


async def _with_daemon(provider: NvmlProvider, uuid: str, memory_mib: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="mps"))
    control = MpsControl(binary="nvidia-cuda-mps-control", pipe_dir=root / "pipe",
                         log_dir=root / "log")  # fmt: skip
    supervisor = MpsSupervisor(control=control, gpus=lambda: [uuid], modes=provider,
                               protocol=mps_protocol(provider.driver_version()))  # fmt: skip
    task = asyncio.create_task(supervisor.run())
    report: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 60
        while supervisor.status.state is not MpsState.RUNNING:
            if time.monotonic() > deadline or task.done():
                report["daemon"] = supervisor.status.to_json()
                return report
            await asyncio.sleep(0.2)
        report["daemon"] = supervisor.status.to_json()
        base = {"CUDA_VISIBLE_DEVICES": uuid}
        pipe = {"CUDA_MPS_PIPE_DIRECTORY": str(control.pipe_dir),
                "CUDA_MPS_LOG_DIRECTORY": str(control.log_dir)}  # fmt: skip

        def env(limits: ClientLimits) -> dict[str, str]:
            # The agent's variables, with the host's directories (a container sees them
            # mounted at the client paths).
            return {**base, **client_env(limits), **pipe}

        soft = ClientLimits(IsolationMode.SOFT, 1, vram_bytes=memory_mib << 20)
        report["memory_limit"] = await asyncio.to_thread(_run_client, "alloc", env(soft))
        report["unlimited_alloc"] = await asyncio.to_thread(
            _run_client, "alloc", env(ClientLimits(IsolationMode.SHARED, 1)))  # fmt: skip
        report["spin_100"] = await asyncio.to_thread(
            _run_client, "spin", env(ClientLimits(IsolationMode.SHARED, 1)))  # fmt: skip
        hard = ClientLimits(IsolationMode.HARD, 1, sm_percent=25)
        report["spin_25"] = await asyncio.to_thread(_run_client, "spin", env(hard))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        report["compute_modes_restored"] = not supervisor.compute_modes_set
        report["daemon_commands"] = supervisor.commands[-5:]
    return report


def probe(memory_mib: int) -> dict[str, Any]:
    """Every step; ProviderError when NVML cannot be used."""
    provider = NvmlProvider()
    gpus = _discovery(provider)
    report: dict[str, Any] = {"driver": provider.driver_version(), "gpus": gpus}
    if not gpus:
        report["error"] = "no GPU found"
        return report
    report.update(asyncio.run(_with_daemon(provider, gpus[0]["uuid"], memory_mib)))
    spin_100 = report.get("spin_100", {}).get("kernel_ms")
    spin_25 = report.get("spin_25", {}).get("kernel_ms")
    if spin_100 and spin_25:
        report["spin_slowdown_at_25_percent"] = round(spin_25 / spin_100, 2)
    return report


def main(argv: list[str]) -> int:
    """The probe (or, with `--client`, one of its clients)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-limit-mib", type=int, default=2048)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--client", choices=("alloc", "spin"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        try:
            found = client_alloc() if args.client == "alloc" else client_spin()
        except (OSError, CudaError) as error:
            found = {"error": str(error)}
        print(json.dumps(found))
        return 0
    try:
        _cuda()
    except OSError as error:
        print(f"the NVIDIA driver's libcuda.so.1 cannot be loaded: {error}", file=sys.stderr)
        return 2
    try:
        report = probe(args.memory_limit_mib)
    except ProviderError as error:
        print(f"NVML: {error}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    failed = "error" in report or any(
        isinstance(v, dict) and "error" in v for v in report.values()
    )  # fmt: skip
    return 1 if failed or report.get("daemon", {}).get("state") != "Running" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
