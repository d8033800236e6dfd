"""Real peers on loopback for the integration tier: Alertmanager, MariaDB, a webhook receiver.

Each process runs in a temporary directory on a free loopback port and is stopped by its PID.
A missing binary fails the test with a message naming `make system-deps`; nothing is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_free_on_all(hosts: Sequence[str]) -> int:
    """A TCP port that is free on every one of the loopback addresses."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise AssertionError(f"no port free on all of {hosts}")


def require_binary(name: str, *candidates: str) -> str:
    """The path of a system binary, or fail naming `make system-deps`."""
    for candidate in (name, *candidates):
        found = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if found:
            return found
    pytest.fail(
        f"{name} is not installed: run `make system-deps` (installs the Debian packages "
        "prometheus-alertmanager and mariadb-server) before the integration tests"
    )


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `check` until it is true or fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


async def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Async poll with a deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, then SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


@dataclass
class WebhookReceiver:
    """An HTTP server that records Alertmanager webhook notifications."""

    port: int = 0
    notifications: list[dict[str, Any]] = field(default_factory=list)
    runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        self.port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        self.notifications.append(await request.json())
        return web.Response(text="ok")

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every notification, optionally only 'firing' or 'resolved'."""
        found = [alert for n in self.notifications for alert in n.get("alerts", [])]
        return [a for a in found if status is None or a.get("status") == status]


@dataclass
class Alertmanager:
    """A real Alertmanager routing everything to one webhook."""

    workdir: Path
    webhook_url: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_config(self) -> Path:
        config = {
            "route": {
                "receiver": "test",
                "group_by": ["alertname", "instance"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "test",
                    "webhook_configs": [{"url": self.webhook_url, "send_resolved": True}],
                }
            ],
        }
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def start(self) -> None:
        binary = require_binary("prometheus-alertmanager", "alertmanager")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.write_config()
        log = (self.workdir / "alertmanager.log").open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self.ready, 30, f"Alertmanager on {self.host}:{self.port}")

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = (self.workdir / "alertmanager.log").read_text(errors="replace")
            raise AssertionError(f"Alertmanager exited: {log[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


@dataclass
class MariaDB:
    """A throwaway MariaDB server (MySQL protocol) on loopback."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        installer = require_binary("mariadb-install-db", "mysql_install_db")
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                installer,
                "--no-defaults",
                f"--datadir={self.workdir / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root" if os.geteuid() == 0 else f"--user={os.getlogin()}",
            ],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        server = require_binary("mariadbd", "/usr/sbin/mariadbd")
        if not (self.workdir / "data").exists():
            self.install()
        log = (self.workdir / "mariadb.log").open("ab")
        args = [
            server,
            "--no-defaults",
            f"--datadir={self.workdir / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.workdir / 'mariadb.sock'}",
            f"--pid-file={self.workdir / 'mariadb.pid'}",
            "--skip-grant-tables",
            "--skip-networking=0",
            "--innodb-buffer-pool-size=16M",
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.ready, 60, f"MariaDB on port {self.port}")

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = (self.workdir / "mariadb.log").read_text(errors="replace")
            raise AssertionError(f"MariaDB exited: {log[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as connection:
                return bool(connection.recv(1))
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


@dataclass
class AlertmanagersBehind:
    """Real Alertmanagers on loopback addresses, on one port, each with its own receiver."""

    managers: list[Alertmanager]
    receivers: list[WebhookReceiver]

    @property
    def port(self) -> int:
        return self.managers[0].port


@contextlib.asynccontextmanager
async def alertmanagers_on(
    hosts: Sequence[str], workdir: Path
) -> AsyncIterator[AlertmanagersBehind]:
    """One Alertmanager per loopback address (the same port on each), stopped afterwards."""
    receivers = [WebhookReceiver() for _ in hosts]
    managers: list[Alertmanager] = []
    try:
        for hook in receivers:
            await hook.start()
        port = port_free_on_all(hosts)
        for host, hook in zip(hosts, receivers, strict=True):
            managers.append(Alertmanager(workdir / f"am-{host}", hook.url, port=port, host=host))
        for manager in managers:
            manager.start()
        yield AlertmanagersBehind(managers, receivers)
    finally:
        for manager in managers:
            manager.stop()
        for hook in receivers:
            await hook.stop()
