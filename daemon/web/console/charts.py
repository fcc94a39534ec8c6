"""Charts as inline SVG, drawn on the server: no script, nothing fetched from anywhere.

x is in minutes relative to now (negative = past, positive = forecast), y in GPUs.
Missing values (None) break a line instead of drawing it at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

W, H = 760, 260
PAD_L, PAD_R, PAD_T, PAD_B = 52, 14, 14, 30


@dataclass
class Line:
    name: str
    xs: list[float]
    ys: list[float | None]
    css: str                 # class: colour and dash come from the stylesheet
    step: bool = False


@dataclass
class Band:
    name: str
    xs: list[float]
    lo: list[float | None]
    hi: list[float | None]
    css: str


@dataclass
class Chart:
    id: str
    title: str
    lines: list[Line] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    y_label: str = "GPUs"

    def _bounds(self) -> tuple[float, float, float]:
        xs = [x for ln in self.lines for x in ln.xs] + [x for b in self.bands for x in b.xs]
        ys = [y for ln in self.lines for y in ln.ys if y is not None] + \
             [y for b in self.bands for y in b.hi if y is not None]
        x0, x1 = (min(xs), max(xs)) if xs else (-60.0, 0.0)
        if x1 <= x0:
            x1 = x0 + 1
        ymax = max(ys) if ys else 1.0
        return x0, x1, _nice(ymax * 1.08)

    def svg(self) -> Markup:
        x0, x1, ymax = self._bounds()
        iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

        def px(x: float) -> float:
            return PAD_L + (x - x0) / (x1 - x0) * iw

        def py(y: float) -> float:
            return PAD_T + ih - (y / ymax) * ih if ymax > 0 else PAD_T + ih

        out = [f'<svg id="{escape(self.id)}" class="chart" viewBox="0 0 {W} {H}" role="img" '
               f'aria-label="{escape(self.title)}" xmlns="http://www.w3.org/2000/svg">',
               f"<title>{escape(self.title)}</title>"]
        for i in range(5):  # y grid and labels
            v = ymax * i / 4
            y = py(v)
            out.append(f'<line class="grid" x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}"/>')
            out.append(f'<text class="tick" x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        for x in _x_ticks(x0, x1):
            X = px(x)
            out.append(f'<line class="grid" x1="{X:.1f}" y1="{PAD_T}" x2="{X:.1f}" y2="{PAD_T + ih}"/>')
            out.append(f'<text class="tick" x="{X:.1f}" y="{H - 10}" text-anchor="middle">{_minutes(x)}</text>')
        if x0 < 0 < x1:
            out.append(f'<line class="now" x1="{px(0):.1f}" y1="{PAD_T}" x2="{px(0):.1f}" y2="{PAD_T + ih}"/>')
        for b in self.bands:
            for seg in _segments(b.xs, list(zip(b.lo, b.hi))):
                top = " ".join(f"{px(x):.1f},{py(hi):.1f}" for x, (lo, hi) in seg)
                bottom = " ".join(f"{px(x):.1f},{py(lo if lo is not None else 0):.1f}" for x, (lo, hi) in reversed(seg))
                out.append(f'<polygon class="{escape(b.css)}" data-series="{escape(b.name)}" points="{top} {bottom}"/>')
        for ln in self.lines:
            for seg in _segments(ln.xs, ln.ys):
                pts = []
                for k, (x, y) in enumerate(seg):
                    if ln.step and k:
                        pts.append(f"{px(x):.1f},{py(seg[k - 1][1]):.1f}")
                    pts.append(f"{px(x):.1f},{py(y):.1f}")
                if len(pts) == 1:  # a single point still shows
                    out.append(f'<circle class="{escape(ln.css)}" data-series="{escape(ln.name)}" '
                               f'cx="{pts[0].split(",")[0]}" cy="{pts[0].split(",")[1]}" r="2.5"/>')
                else:
                    out.append(f'<polyline class="{escape(ln.css)}" data-series="{escape(ln.name)}" '
                               f'points="{" ".join(pts)}"/>')
        out.append(f'<text class="axis" x="12" y="{PAD_T + ih / 2:.0f}" '
                   f'transform="rotate(-90 12 {PAD_T + ih / 2:.0f})" '
                   f'text-anchor="middle">{escape(self.y_label)}</text>')
        out.append("</svg>")
        legend = "".join(f'<span class="key {escape(x.css)}">{escape(x.name)}</span>'
                         for x in [*self.bands, *self.lines])
        return Markup(f'<figure class="chart-box"><figcaption>{escape(self.title)}</figcaption>{"".join(out)}'
                      f'<div class="legend">{legend}</div></figure>')


def _segments(xs: list[float], ys: list) -> list[list[tuple[float, object]]]:
    segs: list[list[tuple[float, object]]] = [[]]
    for x, y in zip(xs, ys):
        missing = y is None or (isinstance(y, tuple) and y[1] is None)
        if missing:
            if segs[-1]:
                segs.append([])
        else:
            segs[-1].append((x, y))
    return [s for s in segs if s]


def _nice(v: float) -> float:
    """The axis top for values up to `v`: four gridline steps of a round size (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times
    a power of ten). A top from (1, 2, 2.5, 5, 10) alone put a 1,024-GPU cluster (1,106 with the margin) under a
    2,000 top, the chart's upper half empty, and labelled a 2,500 top's gridlines 625 and 1,875."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    step = v / 4
    mag = 10 ** math.floor(math.log10(step))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step <= m * mag * (1 + 1e-9):
            return 4 * m * mag
    return 40 * mag


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 or v == 0 else f"{v:.2f}".rstrip("0").rstrip(".")


def _x_ticks(x0: float, x1: float) -> list[float]:
    span = x1 - x0
    step = next((s for s in (5, 10, 15, 30, 60, 120, 240, 360, 720, 1440) if span / s <= 8), 2880)
    first = math.ceil(x0 / step) * step
    return [first + k * step for k in range(int((x1 - first) // step) + 1)]


def _minutes(x: float) -> str:
    if x == 0:
        return "now"
    sign = "+" if x > 0 else "−"
    m = abs(x)
    return f"{sign}{m / 60:g}h" if m >= 60 and m % 30 == 0 else f"{sign}{m:g}m"


def series_x(n: int, step_s: int, end_offset_min: float = 0.0) -> list[float]:
    """x of n evenly spaced past points, the last one `end_offset_min` minutes from now."""
    step = step_s / 60
    return [end_offset_min - (n - 1 - i) * step for i in range(n)]


def forecast_x(n: int, step_s: int) -> list[float]:
    step = step_s / 60
    return [(i + 1) * step for i in range(n)]
