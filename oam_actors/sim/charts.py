"""Self-contained SVG charts for the simulation report: horizontal bars (one or several series)
and a line over time, each with labelled axes and gridlines at round numbers. Pure: text in,
text out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Bar", "Marker", "Series", "bar_chart", "line_chart", "nice_ticks"]

WIDTH = 860
_GRID = "#e3e3e3"
_AXIS = "#888"


@dataclass(frozen=True)
class Series:
    name: str
    color: str


@dataclass(frozen=True)
class Bar:
    """One row of a bar chart: a label and one value per series (None: no value, e.g. no data)."""

    label: str
    values: Sequence[float | None]
    color: str | None = None
    """Overrides the series colour (single-series charts colour rows by meaning)."""


@dataclass(frozen=True)
class Marker:
    """A vertical dashed line on a line chart at ``x``, labelled."""

    x: float
    label: str


def nice_ticks(top: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values from 0 to at least ``top``: steps of 1, 2 or 5 times a power of ten
    (``integer``: no step below 1, for counts)."""
    if not (math.isfinite(top) and top > 0):
        return [0.0, 1.0]
    raw = max(top / count, 1.0) if integer else top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < top - 1e-9 * top:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _number(value: float) -> str:
    """Few digits: 12,345, 42, 7.5, 0.25."""
    if value == int(value) or abs(value) >= 100:
        return f"{round(value):,}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2g}"


def _text(x: float, y: float, text: str, *, anchor: str = "start", css: str = "", extra: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{cls}{extra}>{html.escape(text)}</text>'


def bar_chart(
    bars: Sequence[Bar],
    *,
    axis_label: str,
    series: Sequence[Series] = (Series("", "#2f6f9f"),),
    axis_max: float | None = None,
    unit: str = "",
    value_format: Callable[[float], str] | None = None,
) -> str:
    """Horizontal bars on a value axis from 0 to ``axis_max`` (default: a round number above the
    largest value), with vertical gridlines, tick labels, the axis label under it, and a legend
    when there are several series. Each bar is labelled with ``value_format(value)`` (default:
    a few digits) and ``unit``."""
    show = value_format or _number
    if not bars:
        return "<p>(none)</p>"
    label_width, right, bar_height, gap = 170, 70, 18, 10
    n_series = len(series)
    known = [v for bar in bars for v in bar.values if v is not None]
    counts = all(float(v).is_integer() for v in known)
    ticks = nice_ticks(axis_max if axis_max is not None else max(known, default=0.0), integer=counts)
    top = ticks[-1]
    plot_width = WIDTH - label_width - right
    legend_height = 24 if n_series > 1 else 0
    row_height = n_series * bar_height + gap
    plot_top = legend_height + 4
    plot_height = len(bars) * row_height
    parts: list[str] = []
    if n_series > 1:
        x = label_width
        for s in series:
            parts.append(f'<rect x="{x}" y="4" width="12" height="12" fill="{s.color}" rx="2"/>')
            parts.append(_text(x + 16, 14, s.name))
            x += 30 + 8 * len(s.name)
    for tick in ticks:
        x = label_width + plot_width * tick / top
        parts.append(f'<line x1="{x:.1f}" y1="{plot_top}" x2="{x:.1f}" y2="{plot_top + plot_height}" '
                     f'stroke="{_GRID if tick else _AXIS}"/>')
        parts.append(_text(x, plot_top + plot_height + 15, f"{_number(tick)}{unit}", anchor="middle", css="tick"))
    for row, bar in enumerate(bars):
        y0 = plot_top + row * row_height + gap / 2
        parts.append(_text(label_width - 8, y0 + n_series * bar_height / 2 + 4, bar.label, anchor="end"))
        for index, (value, s) in enumerate(zip(bar.values, series, strict=True)):
            y = y0 + index * bar_height
            if value is None:
                continue
            length = plot_width * min(value, top) / top
            color = bar.color or s.color
            tip = f"{s.name + ': ' if s.name else ''}{show(value)}{unit}"
            parts.append(f'<rect x="{label_width}" y="{y:.1f}" width="{length:.1f}" height="{bar_height - 2}" '
                         f'fill="{color}" rx="2"><title>{html.escape(tip)}</title></rect>')
            parts.append(_text(label_width + length + 5, y + bar_height - 5, f"{show(value)}{unit}", css="value"))
    height = plot_top + plot_height + 44
    parts.append(_text(label_width + plot_width / 2, height - 6, axis_label, anchor="middle", css="axis"))
    return _svg(height, parts, axis_label)


def line_chart(
    values: Sequence[float],
    *,
    x_label: str,
    y_label: str,
    markers: Sequence[Marker] = (),
    color: str = "#2f6f9f",
) -> str:
    """``values[i]`` plotted at x = i (two values at least), with gridlines on both axes, both
    axes labelled, and optional vertical markers."""
    if len(values) < 2:
        return "<p>(too short to draw)</p>"
    left, right, top_pad, bottom = 64, 24, 12, 48
    height = 260
    plot_width = WIDTH - left - right
    plot_height = height - top_pad - bottom
    y_ticks = nice_ticks(max(values), integer=all(float(v).is_integer() for v in values))
    x_ticks = nice_ticks(len(values) - 1, count=10, integer=True)
    y_top, x_top = y_ticks[-1], x_ticks[-1]

    def px(x: float) -> float:
        return left + plot_width * x / x_top

    def py(y: float) -> float:
        return top_pad + plot_height * (1 - y / y_top)

    parts: list[str] = []
    for tick in y_ticks:
        parts.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_width}" y2="{py(tick):.1f}" '
                     f'stroke="{_GRID if tick else _AXIS}"/>')
        parts.append(_text(left - 6, py(tick) + 4, _number(tick), anchor="end", css="tick"))
    for tick in x_ticks:
        parts.append(f'<line x1="{px(tick):.1f}" y1="{top_pad}" x2="{px(tick):.1f}" y2="{top_pad + plot_height}" '
                     f'stroke="{_GRID if tick else _AXIS}"/>')
        parts.append(_text(px(tick), top_pad + plot_height + 15, _number(tick), anchor="middle", css="tick"))
    for marker in markers:
        x = px(min(marker.x, x_top))
        parts.append(f'<line x1="{x:.1f}" y1="{top_pad}" x2="{x:.1f}" y2="{top_pad + plot_height}" '
                     f'stroke="#b04a4a" stroke-dasharray="4 3"/>')
        parts.append(_text(x - 4, top_pad + 12, marker.label, anchor="end", css="marker"))
    points = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
    parts.append(_text(left + plot_width / 2, height - 6, x_label, anchor="middle", css="axis"))
    parts.append(_text(14, top_pad + plot_height / 2, y_label, anchor="middle", css="axis",
                       extra=f' transform="rotate(-90 14 {top_pad + plot_height / 2:.1f})"'))
    return _svg(height, parts, f"{y_label} by {x_label}")


def _svg(height: float, parts: list[str], title: str) -> str:
    return (f'<svg viewBox="0 0 {WIDTH} {height:.0f}" width="{WIDTH}" height="{height:.0f}" role="img" '
            f'aria-label="{html.escape(title)}">{"".join(parts)}</svg>')
