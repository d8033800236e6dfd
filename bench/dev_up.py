"""`tensor-fusion dev up` until every GPU is Running, with the control plane's binaries cached.

Runs the real command as a user would, `--runs` times (default 3) on a fresh directory each,
with the bundled example (4 nodes x 8 GPUs), and times it from the command's start to its exit
(Ready). The supervisor's own step times come from its log. `dev down` follows each run (timed
too). Target: under 30 s on this machine's 2 cores. Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark_doc import write_section

ROOT = Path(__file__).resolve().parent.parent
EXECUTABLE = Path(sys.executable).with_name("tensor-fusion")
TARGET_S = 30.0
_STEP = re.compile(r"^(\S+ \S+),(\d+) INFO tensorfusion\.devenv\.supervisor: dev: (.*)$")


def _steps(log: Path) -> list[tuple[str, float]]:
    """Each step of the supervisor's log with its duration (until the next one)."""
    marks: list[tuple[str, float]] = []
    for line in log.read_text().splitlines():
        found = _STEP.match(line)
        if found:
            when = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            marks.append((found.group(3), when + int(found.group(2)) / 1000))
    return [(name, marks[i + 1][1] - when) for i, (name, when) in enumerate(marks[:-1])]


def run_once(directory: Path) -> dict[str, object]:
    """One `dev up` and `dev down` in `directory`."""
    started = time.monotonic()
    up = subprocess.run([str(EXECUTABLE), "dev", "up", "--dir", str(directory)],
                        capture_output=True, text=True, check=False)  # fmt: skip
    up_s = time.monotonic() - started
    if up.returncode != 0:
        raise SystemExit(f"dev up failed:\n{up.stdout}{up.stderr}")
    state = json.loads((directory / "state.json").read_text())
    started = time.monotonic()
    subprocess.run([str(EXECUTABLE), "dev", "down", "--dir", str(directory)],
                   capture_output=True, text=True, check=True)  # fmt: skip
    down_s = time.monotonic() - started
    return {"up_s": up_s, "down_s": down_s, "gpus": state["gpus"], "nodes": state["nodes"],
            "steps": _steps(directory / "logs" / "supervisor.log")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="tf-dev-bench-") as scratch:
        for i in range(args.runs):
            result = run_once(Path(scratch) / f"run-{i}")
            print(f"run {i + 1}: dev up {result['up_s']:.1f} s, dev down {result['down_s']:.1f} s")
            results.append(result)
    ups = [float(r["up_s"]) for r in results]  # type: ignore[arg-type]
    downs = [float(r["down_s"]) for r in results]  # type: ignore[arg-type]
    median = statistics.median(ups)
    verdict = "meets" if median < TARGET_S else "MISSES"
    spread = f"{min(ups):.1f} / {max(ups):.1f}"
    target = f"< {TARGET_S:.0f} s: {verdict}"
    steps = results[len(results) // 2]["steps"]
    step_text = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps)  # type: ignore[attr-defined]
    section = f"""## `tensor-fusion dev up` (`bench/dev_up.py`)

`tensor-fusion dev up --dir <fresh>` on the bundled example ({results[0]["nodes"]} nodes,
{results[0]["gpus"]} simulated GPUs), the control plane's binaries cached, timed from the
command's start to its exit once every GPU is `Running`; then `dev down`. {args.runs} runs.

| figure | value | target |
|---|---|---|
| dev up → all GPUs Running, median (min / max) | {median:.1f} s ({spread}) | {target} |
| dev down, median | {statistics.median(downs):.1f} s | |

Steps of the median run (the supervisor's log): {step_text}.
"""
    print(section)
    if not args.no_write:
        write_section("dev-up", section)


if __name__ == "__main__":
    main()
