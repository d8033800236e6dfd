"""The HTML report's line charts, drawn by matplotlib as inline SVG (no JavaScript, no network).

Matplotlib is imported on first use, so the CLI starts without it. Figures are built with
`matplotlib.figure.Figure` (no pyplot state); the style is matplotlib's default whatever the
user's matplotlibrc says, text stays text, and element ids come from a fixed salt per chart, so
the same report gives the same bytes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Series", "line_chart_svg"]

# The SVG's dc metadata (date, creator, a purl.org type URI) is dropped: None removes an entry.
_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}

_GROUP_ID = re.compile(r'<g id="[^"]*"')


def _padded(limits: tuple[float, float]) -> tuple[float, float]:
    low, high = limits
    return low, high + 0.03 * (high - low)


@dataclass(frozen=True)
class Series:
    """One line: its legend label, its y values and how it is drawn."""

    label: str
    ys: Sequence[float]
    xs: Sequence[float] | None = None  # the chart's xs when None
    linestyle: str = "-"
    color: str | None = None  # the next colour of the default cycle when None


def line_chart_svg(
    salt: str,
    xs: Sequence[float],
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    ylim: tuple[float, float],
    xlim: tuple[float, float] | None = None,
    height: float = 2.6,
) -> str:
    """An `<svg>` element (no XML prologue) of `series` against `xs`; `salt` keeps ids unique.

    The axes run 3% past the top of `ylim` and `xlim`, so that a line at the edge stays visible.
    """
    # Imported here: every `tensor-fusion` command imports this module, few draw a chart.
    import matplotlib.style  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    overrides = {"svg.hashsalt": f"tensorfusion-{salt}", "svg.fonttype": "none"}
    with matplotlib.style.context(["default", overrides]):
        fig = Figure(figsize=(7.6, height), layout="constrained")
        ax = fig.add_subplot()
        for line in series:
            ax.plot(
                line.xs if line.xs is not None else xs,
                line.ys,
                label=line.label,
                linestyle=line.linestyle,
                color=line.color,
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(_padded(ylim))
        if xlim is not None:
            ax.set_xlim(_padded(xlim))
        ax.grid(alpha=0.3)
        if series:
            ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncols=len(series), frameon=False)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata=_NO_METADATA)
    text = buffer.getvalue()
    # Group ids (figure_1, axes_1, ...) would repeat in every chart of the page; no url() uses them.
    return _GROUP_ID.sub("<g", text[text.index("<svg") :])
