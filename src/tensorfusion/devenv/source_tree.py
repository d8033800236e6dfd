"""Where the dev environment finds what it runs: the source checkout's chart, the control
plane's versions and build script, and the `tensor-fusion` executable.

`tensor-fusion dev up` installs the chart of the checkout it runs from (an editable install,
`make venv`); `TF_SOURCE_DIR` names another checkout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = [
    "BUILD_SCRIPT",
    "CHART",
    "CRDS",
    "EXECUTABLE",
    "NAMESPACE",
    "RELEASE",
    "SOURCE_DIR",
    "VERSIONS_FILE",
    "SourceTreeError",
    "check_source_tree",
]

SOURCE_DIR = Path(os.environ.get("TF_SOURCE_DIR") or Path(__file__).resolve().parents[3])
"""The checkout: `TF_SOURCE_DIR`, else the one this package is installed from."""
CHART = SOURCE_DIR / "charts" / "tensor-fusion"
CRDS = CHART / "crds"
VERSIONS_FILE = SOURCE_DIR / "testenv" / "versions.env"
BUILD_SCRIPT = SOURCE_DIR / "testenv" / "build.sh"
EXECUTABLE = Path(sys.executable).with_name("tensor-fusion")
"""The console script of this environment (controllers and agents run it)."""

RELEASE = "tensor-fusion-sys"
"""The guide's Helm release name."""
NAMESPACE = "tensor-fusion-sys"
"""The guide's release namespace."""


class SourceTreeError(RuntimeError):
    """The checkout lacks what the dev environment needs."""


def check_source_tree() -> None:
    """Raise naming the first missing piece (chart, versions file, build script)."""
    for what, path in (
        ("the chart", CHART / "Chart.yaml"),
        ("the control plane's versions", VERSIONS_FILE),
        ("the control plane's build script", BUILD_SCRIPT),
    ):
        if not path.is_file():
            raise SourceTreeError(
                f"{what} is not at {path}: `tensor-fusion dev` runs from a source checkout "
                "(`make venv` installs it editable); set TF_SOURCE_DIR to the checkout"
            )
