"""A line chart as SVG, for docs/: a handful of series against a logarithmic x axis (the
cluster's size). Written by hand: the benchmark's one chart does not warrant a plotting
library in every virtualenv."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 30, 45
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")

Series = Mapping[str, Sequence[tuple[float, float]]]  # label -> (x, y) points


def line_chart(title: str, x_label: str, y_label: str, series: Series) -> str:
    points = [point for values in series.values() for point in values]
    xs = [math.log10(x) for x, _ in points]
    x_low, x_high = min(xs), max(xs)
    y_high = max(y for _, y in points) * 1.15 or 1.0
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        span = (x_high - x_low) or 1.0
        return (
            LEFT + (math.log10(x) - x_low) / span * plot_width,
            TOP + plot_height - y / y_high * plot_height,
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + plot_height}" x2="{LEFT + plot_width}" '
        f'y2="{TOP + plot_height}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_height}" stroke="black"/>',
        f'<text x="{LEFT + plot_width / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text x="14" y="{TOP + plot_height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_height / 2})">{escape(y_label)}</text>',
    ]
    for x in sorted({x for x, _ in points}):
        left, _ = at(x, 0)
        parts.append(
            f'<text x="{left:.1f}" y="{TOP + plot_height + 16}" text-anchor="middle">'
            f"{x:,.0f}</text>"
        )
    for step in range(5):
        y = y_high * step / 4
        _, top = at(10**x_low, y)
        parts.append(
            f'<text x="{LEFT - 6}" y="{top + 4:.1f}" text-anchor="end">{y:,.0f}</text>'
            f'<line x1="{LEFT}" y1="{top:.1f}" x2="{LEFT + plot_width}" y2="{top:.1f}" '
            'stroke="#ddd"/>'
        )
    for index, (label, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in (at(x, y) for x, y in values))
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in values:
            cx, cy = at(x, y)
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{colour}"/>')
        legend_y = TOP + 14 + index * 18
        parts.append(
            f'<rect x="{WIDTH - RIGHT + 14}" y="{legend_y - 9}" width="12" height="3" '
            f'fill="{colour}"/><text x="{WIDTH - RIGHT + 32}" y="{legend_y - 4}">'
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
