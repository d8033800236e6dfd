"""Local processes of the dev environment and the test control plane: each in its own session,
its output in a log file, stopped by its own PID (SIGTERM, then SIGKILL after a grace period);
readiness polled with a deadline, never slept for."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

LOOPBACK = "127.0.0.1"

#: Seconds each component may take to become ready (2 cores, possibly busy).
START_TIMEOUT = float(os.environ.get("TF_TESTENV_START_TIMEOUT", "180"))
#: Seconds a component gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 20.0

_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


class ControlPlaneError(RuntimeError):
    """The control plane (or one of its components) could not be started or used."""


_HANDED_OUT: set[int] = set()
"""Ports `free_port` gave: a port handed to a process that binds it later (the peer port binds
once its certificate is loaded) must not be handed out again meanwhile."""
_HANDED_OUT_LIMIT = 20_000


def free_port() -> int:
    """A TCP port on loopback that is free now and was not handed out before by this process."""
    if len(_HANDED_OUT) > _HANDED_OUT_LIMIT:
        _HANDED_OUT.clear()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# Looked up once here, so that the child does no library loading between fork and exec.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the child, before exec: get SIGKILL if the test process dies without cleaning up."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def component_environment() -> dict[str, str]:
    """The test process's environment without proxy settings: all traffic stays on loopback."""
    return {key: value for key, value in os.environ.items() if key.lower() not in _PROXY_VARIABLES}


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _stat_fields(pid: int) -> list[str] | None:
    """`/proc/PID/stat` after the command name (state first), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def process_start_time(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (`/proc/PID/stat` field 22),
    which tells it apart from a later process given the same PID; None if there is none."""
    fields = _stat_fields(pid)
    return fields[19] if fields else None


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not; one of ours is reaped)."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    if fields[0] == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def write_pid_file(path: Path, pid: int) -> None:
    """`PID START_TIME` in `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{pid} {process_start_time(pid) or '?'}\n")


def pid_file_process(path: Path) -> int | None:
    """The PID recorded in `path` when that same process still runs (not a reused PID)."""
    try:
        pid_text, _, started = path.read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    now = process_start_time(pid)
    if now is None or (started not in ("", "?") and started != now):
        return None
    return pid if process_alive(pid) else None


def session_processes(session: int) -> list[int]:
    """The PIDs of the live processes in session `session` (its leader's PID)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def kill_session(session: int) -> None:
    """SIGKILL whatever is left of the process group `session` (children a process left)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)


class Component:
    """One control-plane process, its log file, and the means to stop it by its PID."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | Path],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        *,
        pid_file: Path | None = None,
        detached: bool = False,
    ) -> None:
        """`pid_file`: written at start, removed at stop; `detached`: the process outlives
        this one (else it gets SIGKILL when this process dies)."""
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.log_path = log_path
        self.env = dict(env or {})
        self.pid_file = pid_file
        self.detached = detached
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stopped = False

    def __repr__(self) -> str:
        return f"<Component {self.name} pid={self.pid} log={self.log_path}>"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"# {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._stopped = False
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**component_environment(), **self.env},
            start_new_session=True,
            # only calls prctl, looked up beforehand
            preexec_fn=None if self.detached else _stop_with_parent,  # noqa: PLW1509
        )
        if self.pid_file is not None:
            write_pid_file(self.pid_file, self._process.pid)

    @property
    def exit_code(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return self._process.poll() if self._process is not None else None

    def kill(self) -> None:
        """SIGKILL, as `kill -9` would, and wait for the process to end."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def ensure_running(self) -> None:
        """Raises with the end of the log if the process has exited (not after `stop`, which
        ends it on purpose: a caller may still hold the component in a list it polls)."""
        if self._process is None:
            if self._stopped:
                return
            raise ControlPlaneError(f"{self.name} was never started")
        code = self._process.poll()
        if code is not None:
            raise ControlPlaneError(
                f"{self.name} (pid {self._process.pid}) exited with code {code}; "
                f"last lines of {self.log_path}:\n{tail(self.log_path)}"
            )

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM to this process's own PID, then SIGKILL if it outlives ``timeout``."""
        process, self._process = self._process, None
        self._stopped = True
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if process is not None:
            kill_session(process.pid)
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)
        if self._log is not None:
            self._log.close()
            self._log = None


def _timeout_message(what: str, timeout: float, components: Sequence[Component]) -> str:
    logs = "".join(f"\n--- last lines of {c.log_path} ---\n{tail(c.log_path)}" for c in components)
    return f"timed out after {timeout:.0f}s waiting for {what}{logs}"


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float = START_TIMEOUT,
    components: Sequence[Component] = (),
    interval: float = 0.2,
) -> None:
    """Polls ``check`` until it is true; fails early if one of ``components`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        for component in components:
            component.ensure_running()
        if check():
            return
        if time.monotonic() >= deadline:
            raise ControlPlaneError(_timeout_message(what, timeout, components))
        time.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout: float = 60.0,
    interval: float = 0.2,
    components: Sequence[Component] = (),
) -> T:
    """Awaits ``check`` until it returns something other than None or False, and returns that.

    The way to wait for cluster state in tests: poll with a deadline, never sleep for a guess.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        for component in components:
            component.ensure_running()
        last = await check()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                _timeout_message(what, timeout, components) + f"\nlast result: {last!r}"
            )
        await asyncio.sleep(interval)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True when GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def insecure_context() -> ssl.SSLContext:
    """For /healthz of components that serve a self-signed certificate on loopback."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
