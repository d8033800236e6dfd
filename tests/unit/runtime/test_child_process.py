"""`ChildProcess` with real children (sh, sleep): output re-logged by klog level, restarts
after exits and failed health checks, SIGTERM then SIGKILL, and death with the parent."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.child_process import ChildProcess, klog_level

FAST = Backoff(initial=0.01, maximum=0.05)


async def until(check: object, timeout: float = 10.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers: read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_klog_levels() -> None:
    assert klog_level("I1202 12:00:00.000 1 server.go:1] hi") == logging.INFO
    assert klog_level("W1202 careful") == logging.WARNING
    assert klog_level("E1202 broken") == logging.ERROR
    assert klog_level("F1202 fatal") == logging.ERROR
    assert klog_level("plain text") == logging.INFO


async def test_output_is_relogged_and_an_exit_restarts_the_child(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.child")
    child = ChildProcess("child", ["sh", "-c", "echo I1 hello; echo E1 broken; exit 3"], logger,
                         backoff=FAST)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="test.child"):
        task = asyncio.create_task(child.run())
        await until(lambda: child.stats.exits >= 2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert child.stats.last_exit_code == 3 and child.stats.starts >= 2
    levels = {(r.levelno, r.getMessage()) for r in caplog.records if r.name == "test.child"}
    assert (logging.INFO, "I1 hello") in levels and (logging.ERROR, "E1 broken") in levels


async def test_a_child_that_stays_unhealthy_is_restarted() -> None:
    async def never() -> bool:
        return False

    child = ChildProcess("child", ["sleep", "60"], logging.getLogger("test.child"), health=never,
                         health_interval_s=0.01, unhealthy_after_s=0.05, backoff=FAST)  # fmt: skip
    task = asyncio.create_task(child.run())
    await until(lambda: child.stats.unhealthy_restarts >= 2)
    first = child.process
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert first is not None and first.returncode is not None
    assert child.stats.exits == 0


async def test_a_child_ignoring_sigterm_gets_sigkill_and_its_group_goes_too() -> None:
    script = "trap '' TERM; sleep 60 & echo $!; wait"
    child = ChildProcess("stubborn", ["sh", "-c", script], logging.getLogger("test.child"),
                         kill_after_s=0.2, level_of=lambda line: logging.INFO)  # fmt: skip
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Capture()
    logging.getLogger("test.child").addHandler(handler)
    logging.getLogger("test.child").setLevel(logging.INFO)
    try:
        task = asyncio.create_task(child.run())
        await until(lambda: bool(lines))
        grandchild = int(lines[0])
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        logging.getLogger("test.child").removeHandler(handler)
    assert child.process is not None and child.process.returncode == -signal.SIGKILL
    await until(lambda: not alive(grandchild))


def test_a_kill_9_of_the_parent_takes_the_child_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(f"""
        import asyncio, logging
        from tensorfusion.runtime.child_process import ChildProcess

        async def main():
            child = ChildProcess("sleeper", ["sleep", "120"], logging.getLogger("x"))
            task = asyncio.create_task(child.run())
            while child.process is None:
                await asyncio.sleep(0.01)
            open({str(pid_file)!r}, "w").write(str(child.process.pid))
            await task

        asyncio.run(main())
    """)
    process = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.01)
        child = int(pid_file.read_text())
        assert alive(child)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 10
        while alive(child):
            assert time.monotonic() < deadline, "the child outlived a kill -9 of its parent"
            time.sleep(0.01)
    finally:
        if process.poll() is None:
            process.kill()
