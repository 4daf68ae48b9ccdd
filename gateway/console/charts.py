"""Charts of the console as server-rendered SVG (no JavaScript, no assets): a bar chart of one series.
Pure: strings in, a string out, every label escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD, AXIS = 640, 220, 8, 40


def bar_chart(labels: Sequence[str], values: Sequence[float], unit: str) -> str:
    """An ``<svg>`` bar chart: one bar per label (left to right), heights scaled to the largest value,
    each bar's value and label as text; ``unit`` names what the values count ("tokens")."""
    if not values:
        empty = f'<text x="{PAD}" y="24">no {escape(unit)} yet</text>'
        return f'<svg class="chart" viewBox="0 0 {WIDTH} 40" role="img">{empty}</svg>'
    top = max(values) or 1.0
    step = (WIDTH - 2 * PAD) / len(values)
    bars = []
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        height = (HEIGHT - AXIS - PAD) * value / top
        x, y = PAD + index * step, HEIGHT - AXIS - height
        middle = f'x="{x + step / 2:.1f}" text-anchor="middle"'
        bars.append(
            f'<rect x="{x + step * 0.1:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" height="{height:.1f}">'
            f"<title>{escape(label)}: {value:,.0f} {escape(unit)}</title></rect>"
            f'<text {middle} y="{HEIGHT - AXIS + 14}">{escape(label)}</text>'
            f'<text {middle} y="{max(y - 4, 12):.1f}">{value:,.0f}</text>'
        )
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(unit)} by day">'
        + "".join(bars)
        + "</svg>"
    )
