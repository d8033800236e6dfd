"""Writes every dashboard as JSON into the chart (`make dashboards`).

`python -m dashboards.generate` rewrites charts/tensor-fusion/dashboards/*.json;
`--check` only reports the files that differ from what would be written (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders.dashboard import Dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import alerts, gpus, nodes, overview, workloads

__all__ = ["BUILDERS", "OUTPUT_DIR", "render_all", "render_json"]

OUTPUT_DIR: Final = Path(__file__).resolve().parents[1] / "charts" / "tensor-fusion" / "dashboards"
BUILDERS: Final[Mapping[str, Callable[[], Dashboard]]] = {
    "overview": overview.build,
    "nodes": nodes.build,
    "gpus": gpus.build,
    "workloads": workloads.build,
    "alerts": alerts.build,
}
"""Dashboard file name (without `.json`) to its builder."""


def render_json(board: Dashboard) -> str:
    """The dashboard as stable JSON text (sorted keys, two-space indent, final newline)."""
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def render_all() -> dict[str, str]:
    """File name to JSON text of every dashboard."""
    return {f"{name}.json": render_json(build()) for name, build in BUILDERS.items()}


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check compare) the dashboards under OUTPUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only; write nothing")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR)
    args = parser.parse_args(argv)
    rendered = render_all()
    stale = sorted(
        name
        for name, text in rendered.items()
        if not (args.output / name).is_file()
        or (args.output / name).read_text(encoding="utf-8") != text
    )
    extra = sorted(path.name for path in args.output.glob("*.json") if path.name not in rendered)
    if args.check:
        for name in [*stale, *extra]:
            print(f"{args.output / name}: differs from the generated dashboards")
        return 1 if stale or extra else 0
    args.output.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (args.output / name).write_text(rendered[name], encoding="utf-8")
        print(f"wrote {args.output / name}")
    for name in extra:
        (args.output / name).unlink()
        print(f"removed {args.output / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
