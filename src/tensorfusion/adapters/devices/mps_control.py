"""`nvidia-cuda-mps-control`: the command lines of its daemon and of a control command.

The daemon runs in the foreground (`-f`) under the agent's supervision; a control command is the
same binary with the command on its standard input, answering on its standard output. Both get
`CUDA_MPS_PIPE_DIRECTORY` and `CUDA_MPS_LOG_DIRECTORY`. Answers are bounded
(`MAX_ANSWER_BYTES`) and every command has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tensorfusion.domain.isolation.mps_daemon import MAX_ANSWER_BYTES, MpsCommandError

__all__ = ["DEFAULT_BINARY", "MpsControl"]

DEFAULT_BINARY: Final = "nvidia-cuda-mps-control"
COMMAND_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class MpsControl:
    """The daemon's binary and directories (host paths, shared with the workers)."""

    binary: str
    pipe_dir: Path
    log_dir: Path
    timeout_s: float = COMMAND_TIMEOUT_S

    def executable(self) -> str | None:
        """The binary's full path; None when it cannot be found or run."""
        return shutil.which(self.binary)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of the daemon and of control commands."""
        env = dict(os.environ if base is None else base)
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(self.pipe_dir)
        env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log_dir)
        return env

    def daemon_argv(self) -> list[str]:
        """The daemon in the foreground."""
        return [self.executable() or self.binary, "-f"]

    def prepare(self) -> None:
        """Create the directories (pipe 0755: workers connect, only the daemon creates)."""
        for path in (self.pipe_dir, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)

    async def command(self, text: str) -> str:
        """Send one control command; its answer, or MpsCommandError."""
        binary = self.executable()
        if binary is None:
            raise MpsCommandError(f"{self.binary} not found")
        try:
            process = await asyncio.create_subprocess_exec(
                binary, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=self.env(),
            )  # fmt: skip
        except OSError as error:
            raise MpsCommandError(f"cannot run {binary}: {error}") from None
        try:
            out, _ = await asyncio.wait_for(
                process.communicate(f"{text}\n".encode()), self.timeout_s
            )
        except TimeoutError:
            raise MpsCommandError(f"{text!r} had no answer within {self.timeout_s:g} s") from None
        finally:
            if process.returncode is None:  # timed out or cancelled: never leave it behind
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.shield(process.wait())
        answer = out[:MAX_ANSWER_BYTES].decode(errors="replace")
        if process.returncode != 0:
            raise MpsCommandError(
                f"{text!r} failed (code {process.returncode}): {answer.strip()[:200]}"
            )
        return answer
