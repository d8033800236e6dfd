"""The agent's metrics loop (metrics.md §2, §3.1, §3.2, §3.9, §6): every `TF_METRICS_INTERVAL`
it samples the provider (in a thread), builds the `tf_gpu_usage` and `tf_worker_usage` rows of
the cycle (one timestamp) and the `tf_system_log` rows logged since the last cycle, and hands
them to the line-protocol writer (buffered, batched, retried with backoff) for
`TF_METRICS_WRITE_URL`.

Credentials: `token <user>:<password>` when `TF_METRICS_WRITE_USER` and `..._PASSWORD` are set
(GreptimeDB cloud), else `Bearer <token>` from `TF_METRICS_WRITE_TOKEN_FILE` (the pod's
ServiceAccount token; the embedded store on the controller's peer port checks it), read at
every cycle so a rotated token is used at once, and never sent to an `http://` URL. An HTTPS
URL is verified with `TF_METRICS_WRITE_CA_FILE` when set (re-read every cycle: a renewed CA is
used at once). Nothing here ends the agent: a failing sample, token read or
cycle is logged (once per distinct message) and counted, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from tensorfusion.adapters.tls.peer_client import PeerUnavailableError, client_context
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings
from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter, WriteEndpoint
from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.domain.devices.inventory import DeviceProvider, ProviderError
from tensorfusion.domain.isolation.mps_client import ClientLimits
from tensorfusion.domain.isolation.mps_daemon import MpsStatus
from tensorfusion.domain.isolation.share_ticks import ShareTicks
from tensorfusion.domain.metrics.recorders import gpu_usage_rows, worker_usage_rows
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.hypervisor_environment import HypervisorEnvironment
from tensorfusion.hypervisor.agent import NodeAgent
from tensorfusion.hypervisor.object_sync import GPUObjectSync
from tensorfusion.hypervisor.system_log import SystemLogRows
from tensorfusion.hypervisor.usage_samples import NodeGPUCapacity, usage_samples, workers_of

__all__ = ["UsageMetrics", "WriteCredentials", "WriteTls", "usage_metrics"]

_log = logging.getLogger(__name__)
COMPONENT: Final = "hypervisor"
Pods = Callable[[], Iterable[Mapping[str, Any]]]


class WriteCredentials:
    """The `Authorization` header of metric writes to `url`."""

    def __init__(
        self, *, url: str = "", user: str = "", password: str = "", token_file: str = ""
    ) -> None:
        cloud = GreptimeSettings(host="", is_cloud=True, user=user, password=password)
        self._fixed = cloud.authorization()
        self._token_file = Path(token_file) if token_file else None
        self._cleartext = not url.lower().startswith("https://")
        self.error = ""

    def __call__(self) -> str:
        """The header value now ("" when there is none to send)."""
        if self._fixed or self._token_file is None:
            return self._fixed
        if self._cleartext:
            self._report(f"the metrics write URL is not HTTPS: the token {self._token_file} "
                         "is not sent in cleartext")  # fmt: skip
            return ""
        try:
            token = self._token_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            self._report(f"cannot read the metrics write token {self._token_file}: {error}")
            return ""
        if not token:
            self._report(f"the metrics write token file {self._token_file} is empty")
            return ""
        self.error = ""
        return f"Bearer {token}"

    def _report(self, message: str) -> None:
        if message != self.error:
            _log.warning("%s; writing without a token", message)
        self.error = message


class WriteTls:
    """The client context of HTTPS metric writes: `ca_file`'s CA, rebuilt when it changes;
    None (the system's CAs) without a file or while it cannot be read (logged once)."""

    def __init__(self, ca_file: str = "") -> None:
        self._path = Path(ca_file) if ca_file else None
        self._ca = b""
        self._context: ssl.SSLContext | None = None
        self.error = ""

    def __call__(self) -> ssl.SSLContext | None:
        if self._path is None:
            return None
        try:
            ca = self._path.read_bytes()
            if ca != self._ca or self._context is None:
                self._context, self._ca = client_context(ca), ca
        except (OSError, PeerUnavailableError) as error:
            message = f"the metrics write CA {self._path}: {error}"
            if message != self.error:
                _log.warning("%s; verifying with the system's CAs", message)
            self.error = message
            return None
        self.error = ""
        return self._context


class UsageMetrics:
    """One node's usage rows and log rows, every interval, into a writer."""

    def __init__(
        self,
        *,
        provider: DeviceProvider,
        figures: Callable[[], NodeGPUCapacity],
        pods: Pods,
        writer: LineProtocolWriter,
        authorization: Callable[[], str],
        interval_s: float,
        tls: Callable[[], ssl.SSLContext | None] = lambda: None,
        log_rows: SystemLogRows | None = None,
        extra_labels: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ticks = ShareTicks()
        self._provider = provider
        self._extra_labels = dict(extra_labels or {})
        self._figures = figures
        self._pods = pods
        self.writer = writer
        self._authorization = authorization
        self._tls = tls
        self._interval = interval_s
        self.log_rows = log_rows
        self._clock = clock
        self.cycles = 0
        self.rows = 0
        self.sample_failures = 0
        self.cycle_errors = 0
        self._sample_error = ""

    async def cycle(self, now_s: float) -> int:
        """Queue one cycle's rows (all usage rows stamped `now_s`); returns how many."""
        rows: list[MetricRow] = []
        try:
            samples = await asyncio.to_thread(self._provider.sample, now_s)
        except ProviderError as error:
            self.sample_failures += 1
            if str(error) != self._sample_error:
                _log.error("GPU sampling failed, no usage rows this cycle: %s", error)
            self._sample_error = str(error)
        else:
            self._sample_error = ""
            node = self._figures()
            gpus, workers = usage_samples(
                node, samples,
                workers_of(self._pods(), node.pool, extra_labels=self._extra_labels),
                self._ticks,
            )  # fmt: skip
            ts_ms = int(now_s * 1000)
            rows = gpu_usage_rows(gpus, ts_ms) + worker_usage_rows(workers, ts_ms)
        if self.log_rows is not None:
            rows = self.log_rows.drain() + rows
        self.writer.endpoint = WriteEndpoint(self.writer.endpoint.url, self._authorization(),
                                             self._tls())  # fmt: skip
        self.writer.write(rows)
        self.cycles += 1
        self.rows += len(rows)
        return len(rows)

    async def run(self) -> None:
        """Cycles until cancelled (missed ticks skipped), then one final flush."""
        root = logging.getLogger()
        if self.log_rows is not None:
            root.addHandler(self.log_rows)
        await self.writer.start()
        try:
            tick = time.monotonic()
            while True:
                try:
                    await self.cycle(self._clock())
                except Exception:
                    self.cycle_errors += 1
                    _log.exception("metrics cycle failed; next cycle in %g s", self._interval)
                tick += self._interval
                now = time.monotonic()
                if tick < now:
                    tick += math.ceil((now - tick) / self._interval) * self._interval
                await asyncio.sleep(tick - now)
        finally:
            if self.log_rows is not None:
                root.removeHandler(self.log_rows)
                self.writer.write(self.log_rows.drain())
            await self.writer.close()


def _namespace(token_file: str) -> str:
    """The pod's namespace, from the ServiceAccount volume next to its token ("" out of a pod)."""
    try:
        return (Path(token_file).parent / "namespace").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def usage_metrics(
    env: HypervisorEnvironment,
    *,
    provider: DeviceProvider,
    agent: NodeAgent,
    sync: GPUObjectSync,
    pods: Pods,
    mps: Callable[[], MpsStatus | None] = lambda: None,
    enforced: Callable[[], Mapping[tuple[str, str], ClientLimits]] = dict,
) -> UsageMetrics | None:
    """The agent's metrics loop from its settings; None (and one log line) without a URL."""
    if not env.metrics_write_url:
        _log.info("TF_METRICS_WRITE_URL is not set: no usage or log rows are written")
        return None
    target = GreptimeSettings(host="", db=env.metrics_write_db or "public",
                              write_base_url=env.metrics_write_url)  # fmt: skip
    credentials = WriteCredentials(url=env.metrics_write_url, user=env.metrics_write_user,
                                   password=env.metrics_write_password,
                                   token_file=env.metrics_write_token_file)  # fmt: skip

    def figures() -> NodeGPUCapacity:
        inventory = agent.inventory
        vram = {gpu_name(d.uuid): d.vram_bytes for d in inventory.devices} if inventory else {}
        return NodeGPUCapacity(env.node, env.pool, dict(sync.tflops_milli), vram, mps=mps(),
                               enforced=dict(enforced()))  # fmt: skip

    log_rows = SystemLogRows(component=COMPONENT, level=env.log_level, pod=env.pod_name,
                             namespace=_namespace(env.metrics_write_token_file),
                             container=COMPONENT)  # fmt: skip
    return UsageMetrics(provider=provider, figures=figures, pods=pods,
                        writer=LineProtocolWriter(WriteEndpoint(target.write_url())),
                        authorization=credentials, interval_s=env.metrics_interval_s,
                        tls=WriteTls(env.metrics_write_ca_file),
                        log_rows=log_rows, extra_labels=env.metrics_extra_labels)  # fmt: skip
