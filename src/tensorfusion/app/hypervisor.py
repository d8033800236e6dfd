"""`tensor-fusion hypervisor`: the node agent process (deployment.md §9).

It reads its flags and its pod's environment (`HypervisorSettings`), picks the GPU provider
(the simulated file of `TF_SIMULATED_GPUS`, else NVML), and runs under one Supervisor: the
discovery and heartbeat loops (`NodeAgent`), a cache of the pods bound to its node (the worker
pods whose index resources it allocates), the kubelet device plugins of the 16 index resources
(unless `TF_KUBELET_DEVICE_PLUGIN=false`; they give a worker's GPUs only for an allocation the
leader committed, `WorkerDevices`), the metrics loop (usage and log rows for
`TF_METRICS_WRITE_URL`, when set), the device-plugin coexistence loop (with
`DETECT_IN_USED_GPUS=true`), the MPS control daemon that enforces workers' limits (when the
isolation mode needs it and `TF_MPS` allows: `MpsSupervisor`) and HTTP on `HYPERVISOR_PORT`.
Exit 0 on SIGTERM or SIGINT, 2 on a bad flag, variable or provider file.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tensorfusion import __version__
from tensorfusion.adapters.devices.gpu_catalogue import load_gpu_catalogue
from tensorfusion.adapters.devices.mps_control import MpsControl
from tensorfusion.adapters.devices.nvml import NvmlProvider
from tensorfusion.adapters.devices.simulated_file import SimulatedFileProvider
from tensorfusion.adapters.kube.client import KubeClient, KubeClientError, make_client
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.kube.object_client import LightkubeObjects
from tensorfusion.adapters.kubelet.device_plugin import IndexDevicePlugins
from tensorfusion.app.logging_setup import configure_logging
from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.domain.devices.inventory import (
    ComputeModeControl,
    DeviceInfo,
    DeviceProvider,
    ProviderError,
)
from tensorfusion.domain.devices.tflops import lookup_tflops, parse_hardware_metadata
from tensorfusion.domain.isolation.mps_daemon import (
    MpsStatus,
    daemon_needed,
    mps_protocol,
)
from tensorfusion.domain.settings.controller_flags import FlagError
from tensorfusion.domain.settings.environment_values import EnvironmentValueError
from tensorfusion.domain.settings.hypervisor_environment import HypervisorEnvironment
from tensorfusion.domain.settings.hypervisor_settings import HypervisorSettings
from tensorfusion.hypervisor.agent import NodeAgent
from tensorfusion.hypervisor.agent_http import create_agent_app
from tensorfusion.hypervisor.device_usage import DeviceUsageLoop
from tensorfusion.hypervisor.mps_supervisor import MpsSupervisor
from tensorfusion.hypervisor.object_sync import GPUObjectSync, ModelFacts, managed_gpus_of
from tensorfusion.hypervisor.usage_metrics import usage_metrics
from tensorfusion.hypervisor.worker_devices import MpsEnforcement, WorkerDevices
from tensorfusion.runtime.http_server import join_host_port, serve
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource, resource_named
from tensorfusion.runtime.supervision import Supervisor

__all__ = ["EXIT_BAD_INPUT", "run_hypervisor"]

_log = logging.getLogger(__name__)
EXIT_BAD_INPUT: Final = 2


def _provider(env: HypervisorEnvironment) -> SimulatedFileProvider | NvmlProvider:
    if env.simulated_gpus:
        return SimulatedFileProvider(Path(env.simulated_gpus), node_name=env.node)
    return NvmlProvider()


def _runs_mps(env: HypervisorEnvironment, provider: DeviceProvider) -> bool:
    """`TF_MPS=on`, or `auto` with NVML, when the isolation mode needs the daemon."""
    if env.mps == "off" or not daemon_needed(env.isolation_mode, env.isolation_policy):
        return False
    return env.mps == "on" or isinstance(provider, NvmlProvider)


def _mps_supervisor(
    env: HypervisorEnvironment, provider: ComputeModeControl, agent: NodeAgent
) -> MpsSupervisor:
    protocol = 2
    if isinstance(provider, NvmlProvider):
        try:
            protocol = mps_protocol(provider.driver_version())
        except ProviderError as error:
            _log.warning("cannot read the driver version (MPS v2 assumed): %s", error)

    def gpus() -> list[str]:
        inventory = agent.inventory
        return [d.uuid for d in inventory.devices] if inventory else []

    control = MpsControl(binary=env.mps_control, pipe_dir=Path(env.mps_dir) / "pipe",
                         log_dir=Path(env.mps_dir) / "log")  # fmt: skip
    return MpsSupervisor(control=control, gpus=gpus, modes=provider, protocol=protocol,
                         on_change=agent.discover_now)  # fmt: skip


async def run_hypervisor(
    argv: Sequence[str], environ: Mapping[str, str], *, client: KubeClient | None = None
) -> int:
    """Run the agent until a signal; returns the exit code."""
    try:
        settings = HypervisorSettings.read(argv, environ)
    except (FlagError, EnvironmentValueError) as error:
        configure_logging("text", "info")
        _log.error("%s", error)
        return EXIT_BAD_INPUT
    env, discovery_s = settings.env, settings.discovery_interval_s
    configure_logging(settings.flags.log_format, env.log_level)
    for warning in env.warnings:
        _log.warning("%s", warning)
    try:
        hardware = parse_hardware_metadata(env.hardware_metadata, "TF_PROVIDER_HARDWARE_METADATA")
        catalogue = load_gpu_catalogue()
        provider = _provider(env)
        client = client or make_client(settings.flags.kubeconfig)
    except (ProviderError, KubeClientError) as error:
        _log.error("%s", error)
        return EXIT_BAD_INPUT

    def models(device: DeviceInfo) -> ModelFacts:
        found = lookup_tflops(device.model, hardware, catalogue, vendor=device.vendor)
        return ModelFacts(found.tflops_milli, device.model, None if found.known else found.message)

    mps: MpsSupervisor | None = None

    def mps_status() -> dict[str, object]:
        return (mps.status if mps is not None else MpsStatus()).to_json()

    sync = GPUObjectSync(
        objects=LightkubeObjects(client), managed_gpus=managed_gpus_of(client),
        events=EventRecorder(client, "tensor-fusion-hypervisor"), node=env.node, pool=env.pool,
        isolation_policy=env.isolation_policy.value, isolation_mode=env.isolation_mode.value,
        models=models, version=__version__, clock=time.time, mps_status=mps_status,
    )  # fmt: skip
    agent = NodeAgent(provider=provider, sync=sync, discovery_interval_s=discovery_s,
                      heartbeat_interval_s=env.heartbeat_interval_s, clock=time.time)  # fmt: skip
    if _runs_mps(env, provider):
        mps = daemon = _mps_supervisor(env, provider, agent)
        enforcement = MpsEnforcement(status=lambda: daemon.status,
                                     pipe_dir=str(daemon.control.pipe_dir),
                                     log_dir=str(daemon.control.log_dir),
                                     shm_dir=env.mps_shm_dir)  # fmt: skip
    else:
        enforcement = None
        if daemon_needed(env.isolation_mode, env.isolation_policy):
            _log.warning("isolation mode %s: no MPS daemon (TF_MPS=%s, provider %s): workers' "
                         "limits are not enforced on the GPU", env.isolation_mode.value,
                         env.mps, provider.name)  # fmt: skip
    node_pods = LightkubeSource(client, resource_named("Pod"), fields={"spec.nodeName": env.node})
    pods = Informer(node_pods, name="node-pods")

    def native_uuids() -> dict[str, str]:
        inventory = agent.inventory
        return {gpu_name(d.uuid): d.uuid for d in inventory.devices} if inventory else {}

    workers = WorkerDevices(node=env.node, pods=pods.list, native_uuids=native_uuids,
                            gpu_objects=managed_gpus_of(client),
                            events=EventRecorder(client, "tensor-fusion-hypervisor"),
                            mps=enforcement)  # fmt: skip
    plugins = IndexDevicePlugins(workers.allocate) if env.device_plugin else None

    def also_needed() -> list[str]:
        found = []
        if plugins is not None and not plugins.registered:
            found.append("device plugins not registered with the kubelet "
                         f"({plugins.last_error or 'waiting'})")  # fmt: skip
        if mps is not None and not mps.status.serving:
            status = mps.status
            found.append(f"MPS control daemon {status.state.value}"
                         + (f": {status.message}" if status.message else ""))  # fmt: skip
        return found

    supervisor = Supervisor()
    supervisor.start("node-pods", pods.run)
    supervisor.start("agent", agent.run)
    if mps is not None:
        supervisor.start("mps-daemon", mps.run)
    usage = usage_metrics(env, provider=provider, agent=agent, sync=sync, pods=pods.list,
                          mps=lambda: mps.status if mps is not None else None,
                          enforced=lambda: workers.enforced)  # fmt: skip
    if usage is not None:
        supervisor.start("usage-metrics", usage.run)
    device_usage = DeviceUsageLoop(node=env.node, enabled=env.detect_in_used_gpus,
                                   objects=LightkubeObjects(client),
                                   managed_gpus=managed_gpus_of(client))  # fmt: skip
    if device_usage.enabled:
        supervisor.start("device-usage", device_usage.run)
    if plugins is not None:
        supervisor.start("device-plugins", plugins.run)
    address = join_host_port(env.bind_host, env.port) if env.bind_host else f":{env.port}"
    try:
        server = await serve(create_agent_app(agent, also_needed), address)
    except OSError as error:
        _log.error("cannot listen on %s: %s", address, error)
        await supervisor.stop()
        return EXIT_BAD_INPUT
    _log.info("node agent of %s (pool %s, %s) listening on %s", env.node, env.pool or "-",
              provider.name, server.address)  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        _log.info("node agent stopping")
        await server.stop()
        await supervisor.stop()
    return 0
