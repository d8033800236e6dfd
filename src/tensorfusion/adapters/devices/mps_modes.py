"""The GPUs' compute modes from before the MPS daemon, in a small JSON file (`{uuid: mode}`) next
to the daemon's directories, so that an agent that was killed restores the original modes at
its next clean stop. A file that cannot be read or parsed counts as empty (logged)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tensorfusion.domain.devices.inventory import ComputeMode

__all__ = ["ModesFile"]

_log = logging.getLogger(__name__)
MAX_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class ModesFile:
    """`path` holds the original compute mode of each GPU the daemon's supervisor changed."""

    path: Path

    def load(self) -> dict[str, ComputeMode]:
        """The saved modes; empty when there is no usable file."""
        try:
            text = self.path.read_bytes()[:MAX_BYTES]
            raw = json.loads(text)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            _log.warning("%s: not used (%s)", self.path, error)
            return {}
        modes = {m.value: m for m in ComputeMode}
        if not isinstance(raw, dict):
            return {}
        return {str(k): modes[v] for k, v in raw.items() if isinstance(v, str) and v in modes}

    def save(self, modes: dict[str, ComputeMode]) -> None:
        """Write `modes` (atomically); an empty mapping removes the file."""
        if not modes:
            self.path.unlink(missing_ok=True)
            return
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({k: v.value for k, v in sorted(modes.items())}))
        os.replace(temporary, self.path)
