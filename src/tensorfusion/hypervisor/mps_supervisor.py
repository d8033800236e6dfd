"""The node's MPS control daemon under the agent (hypervisor.md, *GPU isolation*).

`MpsSupervisor.run()` waits for the first discovery, sets every GPU to EXCLUSIVE_PROCESS (so
no process can use it outside MPS) after creating the pipe and log directories, then keeps
`nvidia-cuda-mps-control -f` running as a `ChildProcess`: healthy while `get_server_list`
answers, restarted with backoff when it exits or stops answering. A GPU discovered later gets
its compute mode at the next health check. When it cannot start (binary missing, compute mode
refused) the state is `Failed` with the reason, retried with backoff. On the way out it sends
`quit`, stops the process and gives every GPU back the compute mode it had. `status` is what the
GPUNode heartbeat, `/readyz`, the metrics and the kubelet's Allocate read; `on_change` is called
when the state changes (the agent then writes its heartbeat at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Final

from tensorfusion.adapters.devices.mps_control import MpsControl
from tensorfusion.adapters.devices.mps_modes import ModesFile
from tensorfusion.domain.backoff import Backoff, RetryDelays
from tensorfusion.domain.devices.inventory import ComputeMode, ComputeModeControl, ProviderError
from tensorfusion.domain.isolation.mps_daemon import (
    GET_SERVER_LIST,
    QUIT,
    MpsCommandError,
    MpsState,
    MpsStatus,
    parse_server_list,
)
from tensorfusion.runtime.child_process import ChildProcess

__all__ = ["MpsSupervisor"]

_log = logging.getLogger(__name__)
_daemon_log = logging.getLogger("tensorfusion.mps-daemon")
HEALTH_INTERVAL_S: Final = 2.0
UNHEALTHY_AFTER_S: Final = 10.0
QUIT_WAIT_S: Final = 2.0
"""How long `quit`, and then the exit, may each take before SIGTERM (the whole shutdown stays
within the agent Supervisor's stop timeout)."""
MODES_FILE: Final = "compute-modes.json"
"""The GPUs' compute modes from before the first daemon, kept in `TF_MPS_DIR` so that an agent
that did not stop cleanly does not take EXCLUSIVE_PROCESS for the original mode."""
BACKOFF: Final = Backoff(initial=1.0, maximum=30.0)


class MpsSupervisor:
    """The daemon of one node: `gpus` lists the device uuids of the last discovery."""

    def __init__(
        self,
        *,
        control: MpsControl,
        gpus: Callable[[], Sequence[str]],
        modes: ComputeModeControl,
        protocol: int = 2,
        on_change: Callable[[], None] = lambda: None,
        health_interval_s: float = HEALTH_INTERVAL_S,
        unhealthy_after_s: float = UNHEALTHY_AFTER_S,
        backoff: Backoff = BACKOFF,
    ) -> None:
        self.control = control
        """The daemon's binary and directories (Allocate mounts its directories)."""
        self._gpus = gpus
        self._modes = modes
        self._protocol = protocol
        self._on_change = on_change
        self._health_interval = health_interval_s
        self._unhealthy_after = unhealthy_after_s
        self._backoff = backoff
        self._previous_modes: dict[str, ComputeMode] = {}
        self._modes_file = ModesFile(control.pipe_dir.parent / MODES_FILE)
        self._saved: dict[str, ComputeMode] | None = None
        self._failure = ""
        self._child: ChildProcess | None = None
        self._reported: MpsStatus | None = None
        self.commands: list[str] = []
        """Control commands sent, in order (for `/readyz` detail and tests)."""

    @property
    def status(self) -> MpsStatus:
        """The daemon as last seen."""
        child = self._child
        if self._failure:
            return MpsStatus(MpsState.FAILED, message=self._failure, protocol=self._protocol)
        if child is None:
            return MpsStatus(MpsState.STARTING, protocol=self._protocol)
        stats = child.stats
        restarts = max(stats.starts - 1, 0)
        if stats.healthy:
            state = MpsState.RUNNING
        elif stats.starts <= 1 and not stats.exits and not stats.unhealthy_restarts:
            state = MpsState.STARTING
        else:
            state = MpsState.RESTARTING
        message = "" if stats.last_exit_code is None else f"last exit code {stats.last_exit_code}"
        return MpsStatus(state, restarts=restarts, message=message, protocol=self._protocol)

    @property
    def compute_modes_set(self) -> frozenset[str]:
        """The GPUs this supervisor put in EXCLUSIVE_PROCESS (and will give back)."""
        return frozenset(self._previous_modes)

    async def run(self) -> None:
        """Keep the daemon running until cancelled; then stop it and undo the compute modes."""
        child_task: asyncio.Task[None] | None = None
        try:
            await self._prepared()
            self._child = ChildProcess(
                name="MPS control daemon", argv=self.control.daemon_argv(),
                logger=_daemon_log, env=self.control.env(), health=self._healthy,
                health_interval_s=self._health_interval,
                unhealthy_after_s=self._unhealthy_after, backoff=self._backoff,
                level_of=lambda _line: logging.INFO, quit=self._quit, kill_after_s=QUIT_WAIT_S,
            )  # fmt: skip
            child_task = asyncio.create_task(self._child.run(), name="mps-daemon")
            while True:
                self._report()
                gpus = tuple(self._gpus())
                if any(uuid not in self._previous_modes for uuid in gpus):  # a new GPU
                    problem = await asyncio.to_thread(self._set_modes, gpus)
                    if problem:
                        _log.warning("%s", problem)
                if child_task.done():
                    child_task.result()  # a crash of the child loop is the Supervisor's to see
                await asyncio.sleep(self._health_interval / 2)
        finally:
            await self._shutdown(child_task)

    async def _prepared(self) -> None:
        """Until the directories, the binary and every known GPU's compute mode are ready."""
        delays = RetryDelays(self._backoff)
        while True:
            gpus = tuple(self._gpus())
            problem = await asyncio.to_thread(self._prepare, gpus) if gpus else None
            if gpus and problem is None:
                self._failure = ""
                return
            if problem:
                if problem != self._failure:
                    _log.error("MPS control daemon cannot start: %s", problem)
                self._failure = problem
            self._report()
            await asyncio.sleep(delays.next_delay() if problem else self._health_interval / 2)

    def _prepare(self, gpus: Sequence[str]) -> str | None:
        if self.control.executable() is None:
            return f"{self.control.binary} not found (TF_MPS_CONTROL, PATH)"
        try:
            self.control.prepare()
        except OSError as error:
            return f"cannot create the MPS directories: {error}"
        return self._set_modes(gpus)

    def _set_modes(self, gpus: Sequence[str]) -> str | None:
        if self._saved is None:
            self._saved = self._modes_file.load()
        added = False
        for uuid in gpus:
            if uuid in self._previous_modes:
                continue
            try:
                previous = self._modes.set_compute_mode(uuid, ComputeMode.EXCLUSIVE_PROCESS)
            except ProviderError as error:
                return f"cannot set GPU {uuid} to EXCLUSIVE_PROCESS: {error}"
            # A mode saved by an agent that did not stop cleanly is the original one.
            self._previous_modes[uuid] = self._saved.get(uuid, previous)
            added = True
            _log.info("GPU %s: compute mode %s -> %s", uuid, previous.value,
                      ComputeMode.EXCLUSIVE_PROCESS.value)  # fmt: skip
        if added:
            self._save_modes()
        return None

    def _save_modes(self) -> None:
        try:
            self._modes_file.save(dict(self._previous_modes))
        except OSError as error:
            _log.warning("cannot keep the GPUs' original compute modes: %s", error)

    async def _healthy(self) -> bool:
        self.commands.append(GET_SERVER_LIST)
        del self.commands[:-100]
        try:
            parse_server_list(await self.control.command(GET_SERVER_LIST))
        except MpsCommandError as error:
            _log.warning("MPS control daemon does not answer: %s", error)
            return False
        return True

    def _report(self) -> None:
        status = self.status
        if status == self._reported:
            return
        level = logging.INFO if status.state in (MpsState.STARTING, MpsState.RUNNING) else (
            logging.WARNING)  # fmt: skip
        _log.log(level, "MPS control daemon: %s%s", status.state.value,
                 f" ({status.message})" if status.message else "")  # fmt: skip
        self._reported = status
        try:
            self._on_change()
        except Exception:  # a report must never stop the supervision
            _log.exception("MPS state change callback failed")

    async def _quit(self) -> None:
        self.commands.append(QUIT)
        await self.control.command(QUIT)

    async def _shutdown(self, child_task: asyncio.Task[None] | None) -> None:
        """`quit` (then SIGTERM) through the child's stop, then the compute modes back."""
        if child_task is not None:
            child_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await child_task
        await asyncio.to_thread(self._restore_modes)

    def _restore_modes(self) -> None:
        for uuid, previous in list(self._previous_modes.items()):
            try:
                self._modes.set_compute_mode(uuid, previous)
            except ProviderError as error:
                _log.error("GPU %s: cannot restore compute mode %s: %s", uuid, previous.value,
                           error)  # fmt: skip
                continue
            del self._previous_modes[uuid]
            _log.info("GPU %s: compute mode restored to %s", uuid, previous.value)
        self._save_modes()
