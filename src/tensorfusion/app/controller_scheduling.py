"""Scheduling on the leader: the extender site and the child kube-scheduler (scheduling.md §15).

`prepare_scheduling` runs the start-up checks (binary, configuration, version skew) and builds
the extender; `SchedulingWork.work` is the leader work: the extender site on
`-scheduler-extender-bind-address`, the 10 s assumption sweep and the child kube-scheduler, all
stopped when leadership ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CollectorRegistry

from tensorfusion.adapters.kube.client import (
    KEPT_ALIVE_CONNECTIONS,
    KubeClient,
    make_client,
    server_version,
)
from tensorfusion.adapters.kube.events import EventRecorder, InvolvedObject
from tensorfusion.adapters.kube.pod_binding import LightkubePodBinding
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.native_state import NativeState
from tensorfusion.domain.object_views import name_of, namespace_of, uid_of
from tensorfusion.domain.scheduling.scheduler_config import SchedulerSettings
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags
from tensorfusion.extender.app import ExtenderMetrics, create_extender_app
from tensorfusion.extender.kube_scheduler import (
    KubeScheduler,
    SchedulerStartError,
    binary_version,
    check_versions,
    plan_kube_scheduler,
)
from tensorfusion.extender.scheduling import Extender
from tensorfusion.runtime.event_queue import EventQueue
from tensorfusion.runtime.http_server import serve
from tensorfusion.runtime.informer import ObjectCache

__all__ = ["EVENT_COMPONENT", "PodEventRecorder", "SchedulingWork", "prepare_scheduling"]

_log = logging.getLogger(__name__)
EVENT_COMPONENT = "tensor-fusion-scheduler"
EVENT_WRITERS = 4


@dataclass(slots=True)
class PodEventRecorder:
    """`PodEvents` over the Event queue."""

    queue: EventQueue

    def pod_event(
        self,
        pod: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        involved = InvolvedObject(
            kind="Pod", name=name_of(pod), namespace=namespace_of(pod), uid=uid_of(pod),
            api_version="v1",
        )  # fmt: skip
        self.queue.submit(involved, type_, reason, message)


@dataclass(slots=True)
class SchedulingWork:
    """The extender and the child kube-scheduler of a leader."""

    extender: Extender
    metrics: ExtenderMetrics
    bind_address: str
    kube_scheduler: KubeScheduler
    events: EventQueue

    async def work(self, _: object) -> None:
        """Leader work: serve the extender and run the child until cancelled."""
        server = await serve(create_extender_app(self.extender, self.metrics), self.bind_address)
        _log.info("scheduler extender listening on %s", server.address)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.events.run(), name="extender events")
                group.create_task(self.extender.sweep_forever(), name="assumption sweep")
                group.create_task(self.kube_scheduler.run(), name="kube-scheduler")
        finally:
            await server.stop()


async def prepare_scheduling(
    *,
    flags: ControllerFlags,
    env: ControllerEnvironment,
    client: KubeClient,
    scheduler_config: Mapping[str, Any],
    settings: SchedulerSettings,
    state: AllocatorState,
    native: NativeState,
    workers: ObjectCache,
    fence: Callable[[], float],
    registry: CollectorRegistry,
) -> SchedulingWork:
    """The extender and the child's plan; SchedulerStartError for what cannot run."""
    plan = plan_kube_scheduler(
        scheduler_config,
        binary=flags.kube_scheduler_path,
        extender_address=flags.scheduler_extender_bind_address,
        kubeconfig=flags.kubeconfig,
    )
    try:
        ours, theirs = await binary_version(plan.binary), await server_version(client)
    except SchedulerStartError:
        raise
    except Exception as error:
        raise SchedulerStartError(f"cannot compare kube-scheduler's version: {error}") from None
    warning = check_versions(ours, theirs)
    if warning:
        _log.warning("%s", warning)
    # Its own client, so that the binds' connections are not taken by the informers' watches;
    # the binds and the Event writers together stay within its kept-alive connections.
    calls = make_client(flags.kubeconfig)
    events = EventQueue(EventRecorder(calls, EVENT_COMPONENT), fence=fence,
                        writers=EVENT_WRITERS)  # fmt: skip
    extender = Extender(
        allocator=lambda: state.allocator, native=native.cluster,
        pods=LightkubePodBinding(calls), cache=workers, events=PodEventRecorder(events),
        fence=fence, profile=settings.profile, progressive_migration=env.progressive_migration,
        max_binds_in_flight=KEPT_ALIVE_CONNECTIONS - EVENT_WRITERS,
    )  # fmt: skip
    metrics = ExtenderMetrics(registry)
    metrics.watch_events(events)
    return SchedulingWork(
        extender, metrics, flags.scheduler_extender_bind_address, KubeScheduler(plan), events,
    )  # fmt: skip
