"""A stand-in for `nvidia-cuda-mps-control` (tests only): the daemon in the foreground (`-f`) and
the control client (commands on standard input), speaking MPS's line protocol over a Unix socket
`control` in `CUDA_MPS_PIPE_DIRECTORY`. The daemon writes its PID to
`nvidia-cuda-mps-control.pid` there and every command it receives to `control.log` in
`CUDA_MPS_LOG_DIRECTORY` (one `command: <text>` line each), which the tests read.

Answers: `get_server_list` the fake server PIDs (one per `start_server -uid <uid>`);
`get_default_active_thread_percentage` the value last set (100.0 at start);
`set_default_active_thread_percentage <p>` and `set_default_device_pinned_mem_limit <dev> <v>`
store the value; `quit` answers nothing and exits 0; anything else `Unknown command`.
The client prints `Cannot find MPS control daemon process` and exits 1 when no daemon listens.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

PIPE = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
LOG = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
SOCKET = PIPE / "control"
PID_FILE = PIPE / "nvidia-cuda-mps-control.pid"


def _answer(command: str, state: dict[str, object]) -> tuple[str, bool]:
    words = command.split()
    if not words:
        return "", False
    name, args = words[0], words[1:]
    servers = state.setdefault("servers", [])
    assert isinstance(servers, list)
    if name == "get_server_list":
        return "".join(f"{pid}\n" for pid in servers), False
    if name == "start_server" and args[:1] == ["-uid"] and len(args) == 2 and args[1].isdigit():
        servers.append(100000 + int(args[1]))
        return "", False
    if name == "get_default_active_thread_percentage":
        return f"{float(str(state.get('threads', 100))):.1f}\n", False
    if name == "set_default_active_thread_percentage" and len(args) == 1:
        state["threads"] = args[0]
        return f"{float(args[0]):.1f}\n", False
    if name == "set_default_device_pinned_mem_limit" and len(args) == 2:
        state[f"memory:{args[0]}"] = args[1]
        return "", False
    if name == "quit":
        return "", True
    return "Unknown command\n", False


def daemon() -> int:
    """The control daemon in the foreground until `quit` or SIGTERM."""
    PIPE.mkdir(parents=True, exist_ok=True)
    LOG.mkdir(parents=True, exist_ok=True)
    if SOCKET.exists():
        SOCKET.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(SOCKET))
    server.listen(8)
    PID_FILE.write_text(f"{os.getpid()}\n", encoding="ascii")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    state: dict[str, object] = {}
    with (LOG / "control.log").open("a", encoding="utf-8") as log:
        log.write("daemon: started\n")
        log.flush()
        try:
            while True:
                connection, _ = server.accept()
                with connection:
                    command = connection.makefile("r", encoding="utf-8").readline().strip()
                    log.write(f"command: {command}\n")
                    log.flush()
                    answer, stop = _answer(command, state)
                    connection.sendall(answer.encode())
                if stop:
                    log.write("daemon: quit\n")
                    return 0
        finally:
            server.close()
            for path in (SOCKET, PID_FILE):
                path.unlink(missing_ok=True)


def client() -> int:
    """Each line of standard input sent to the daemon; its answers printed."""
    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(SOCKET))
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        with connection:
            connection.sendall(f"{command}\n".encode())
            chunks = []
            while chunk := connection.recv(4096):
                chunks.append(chunk)
        sys.stdout.write(b"".join(chunks).decode())
    return 0


def main(argv: list[str]) -> int:
    """`-f`: the daemon; no argument: the client."""
    if argv == ["-f"]:
        return daemon()
    if not argv:
        return client()
    print(f"stand-in nvidia-cuda-mps-control supports -f and the client only, not {argv}",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
