"""Writes one benchmark's section of docs/benchmarks.md, keeping the other sections."""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

__all__ = ["machine_description", "write_section"]

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Figures written by the scripts under `bench/` (`make bench`). Each section is replaced "
    "when its script runs again; the date and machine are those of the run.\n"
)


def machine_description() -> str:
    """CPU model, core count and Python version of this machine."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section `name` of docs/benchmarks.md with `body`."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = f"{start}\n{body.rstrip()}\n\nRun {stamp} on {machine_description()}.\n{end}"
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
