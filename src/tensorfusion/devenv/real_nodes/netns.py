"""Network namespaces: create, enter (a thread or a child process), run `ip` inside, remove.

Nothing here adds an address or a route to the machine's own namespace: every `ip` command names
the namespace it changes.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from tensorfusion.devenv.processes import ControlPlaneError

T = TypeVar("T")

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


class NetnsError(ControlPlaneError):
    """A namespace could not be created, entered or changed."""


def netns_path(name: str) -> Path:
    """Where `ip netns add NAME` pins namespace NAME."""
    return NETNS_DIR / name


def enter(path: Path) -> None:
    """Moves the calling thread (or a single-threaded process) into the namespace at `path`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NetnsError(f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def call_in(path: Path, function: Callable[..., T], *args: object) -> T:
    """`function(*args)` in a thread of its own inside the namespace at `path`."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            enter(path)
            result.append(function(*args))
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{path.name}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def nsenter(path: Path, argv: Sequence[str | Path]) -> list[str]:
    """`argv` run inside the namespace at `path` (nsenter execs it: the PID stays the program's)."""
    return ["nsenter", f"--net={path}", "--", *(str(arg) for arg in argv)]


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    stdin: str | None = None,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Runs a command; a failure raises with the command and its error output."""
    result = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise NetnsError(
            f"exit {result.returncode}: {' '.join(str(a) for a in argv)}\n{result.stderr.strip()}"
        )
    return result


def ip(namespace: str, *args: str) -> None:
    """`ip -n NAMESPACE ARGS...`."""
    run(["ip", "-n", namespace, *args])


def add(name: str) -> Path:
    """Creates namespace `name` with its loopback up; returns its path."""
    run(["ip", "netns", "add", name])
    ip(name, "link", "set", "lo", "up")
    return netns_path(name)


def delete(name: str) -> None:
    """Removes namespace `name` if it exists (its interfaces go with it)."""
    if netns_path(name).exists():
        run(["ip", "netns", "delete", name], check=False)


def sysctl(namespace: str, key: str, value: str) -> None:
    """Sets a per-namespace sysctl (net.*) inside `namespace`."""
    run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w", f"{key}={value}"])
