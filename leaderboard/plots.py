"""Hand-written SVG scatter plots (no plotting library, nothing external): a track's score against
communication and against heterogeneity. This module only maps numbers to pixel geometry;
``templates/macros.html`` draws it, with a ``<title>`` on every point (shown on hover) and a link to
the page behind it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from leaderboard.formatting import alpha_number

# one colour per series: a 20-colour qualitative map (the ten strong hues of "tab20", then their ten
# light ones), so that 13 series never share a colour; the marker tells the partitions apart
# (PARTITION_SHAPES, by first appearance)
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
SHAPES = ("circle", "triangle", "square", "diamond", "down")
W, H = 600, 320
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 14, 48
# direct labels: the series' names right of the plot box, each beside its last point
LABEL_W, LABEL_GAP = 200, 13
# the heterogeneity plot is drawn from this many partition settings up: through two points per
# series, lines are a tangle of near-flat segments that the table says better
MIN_ALPHAS = 3


@dataclass
class Point:
    series: str  # legend label (method and its configuration)
    x: float  # data units (bytes, α); inf = IID on the α plot
    y: float
    title: str  # hover text
    href: str | None = None
    hollow: bool = False  # incomplete: fewer seeds than the track requires
    err: float | None = None  # ± (the std over seeds)
    # a reference point (random init, central, ...): dashed line, never ranked
    reference: bool = False
    partition: str = ""  # the partition's short label: its marker shape


@dataclass
class Plot:
    x_label: str
    y_label: str
    xticks: list[dict[str, Any]] = field(default_factory=list)
    yticks: list[dict[str, Any]] = field(default_factory=list)
    series: list[dict[str, Any]] = field(default_factory=list)
    width: int = W
    height: int = H
    box: tuple[float, float, float, float] = (LEFT, TOP, W - RIGHT, H - BOTTOM)
    # x pixel positions of an axis break (the "none" column)
    breaks: list[float] = field(default_factory=list)
    # partition → marker (the marker legend)
    shapes: list[dict[str, Any]] = field(default_factory=list)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 × 10^k) covering [lo, hi].

    >>> nice_ticks(41.0, 89.0)
    [40.0, 50.0, 60.0, 70.0, 80.0, 90.0]
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    if out[-1] < hi:
        out.append(round(out[-1] + step, 10))
    return out


def _marker(shape: str, cx: float, cy: float, r: float = 4.5) -> str:
    if shape == "square":
        return f"M{cx - r:.1f},{cy - r:.1f}h{2 * r:.1f}v{2 * r:.1f}h{-2 * r:.1f}z"
    if shape == "diamond":
        return (
            f"M{cx:.1f},{cy - r * 1.3:.1f}l{r * 1.3:.1f},{r * 1.3:.1f}l{-r * 1.3:.1f},{r * 1.3:.1f}"
            f"l{-r * 1.3:.1f},{-r * 1.3:.1f}z"
        )
    if shape == "triangle":
        return f"M{cx:.1f},{cy - r * 1.2:.1f}l{r * 1.2:.1f},{r * 2:.1f}h{-r * 2.4:.1f}z"
    if shape == "down":
        return f"M{cx:.1f},{cy + r * 1.2:.1f}l{r * 1.2:.1f},{-r * 2:.1f}h{-r * 2.4:.1f}z"
    return f"M{cx - r:.1f},{cy:.1f}a{r:.1f},{r:.1f} 0 1,0 {2 * r:.1f},0a{r:.1f},{r:.1f} 0 1,0 {-2 * r:.1f},0z"


def _y_scale(
    points: Sequence[Point], box: tuple[float, float, float, float]
) -> tuple[Callable, list[float]]:
    lows = [p.y - (p.err or 0) for p in points]
    highs = [p.y + (p.err or 0) for p in points]
    ticks = nice_ticks(min(lows), max(highs))
    lo, hi = ticks[0], ticks[-1]
    top, bottom = box[1], box[3]
    return (lambda v: bottom - (v - lo) / (hi - lo) * (bottom - top)), ticks


def _series(
    points: Sequence[Point],
    xpos: Callable[[float], float],
    ypos: Callable[[float], float],
    connect: bool,
    by_partition: bool = True,
) -> list[dict[str, Any]]:
    """One entry per series: colour, marker, marks and line. ``by_partition``: the marker tells the
    partitions apart (the communication plot); otherwise each series has its own marker (colour
    and marker together: no two of 100 series look alike)."""
    names = list(dict.fromkeys(p.series for p in points))
    shapes = partition_shapes(points) if by_partition else {}
    out = []
    for i, name in enumerate(names):
        mine = sorted((p for p in points if p.series == name), key=lambda p: xpos(p.x))
        colour = COLOURS[i % len(COLOURS)]
        shape = SHAPES[i % len(SHAPES)] if not shapes else "circle"
        marks = []
        for p in mine:
            cx, cy = xpos(p.x), ypos(p.y)
            err = None if not p.err else (ypos(p.y + p.err), ypos(p.y - p.err))
            marks.append(
                {
                    "d": _marker(shapes.get(p.partition, shape), cx, cy),
                    "cx": round(cx, 1),
                    "cy": round(cy, 1),
                    "err": err,
                    "title": p.title,
                    "href": p.href,
                    "hollow": p.hollow,
                }
            )
        solid = [p for p in mine if not p.hollow]
        path = " ".join(
            f"{'M' if j == 0 else 'L'}{xpos(p.x):.1f},{ypos(p.y):.1f}" for j, p in enumerate(solid)
        )
        out.append(
            {
                "name": name,
                "colour": colour,
                "shape": shape,
                "swatch": _marker(shape, 6, 6, 4),
                "marks": marks,
                "path": path if connect and len(solid) > 1 else "",
                "dashed": any(p.reference for p in mine),
                "end": (round(xpos(mine[-1].x), 1), round(ypos(mine[-1].y), 1)),
            }
        )
    return out


def direct_labels(plot: Plot) -> None:
    """Name every series right of the plot box, level with its last (rightmost) point, with a
    leader line to it; labels closer than LABEL_GAP are pushed apart (the figure grows to hold
    them)."""
    if not plot.series:
        return
    right = plot.box[2]
    order = sorted(range(len(plot.series)), key=lambda i: plot.series[i]["end"][1])
    y = -math.inf
    for i in order:
        s = plot.series[i]
        y = max(s["end"][1], y + LABEL_GAP)
        s["label"] = {
            "x": right + 14,
            "y": round(y, 1),
            "swatch": _marker(s["shape"], right + 18, y - 4, 3.5),
        }
    plot.width += LABEL_W
    plot.height = max(plot.height, int(y) + 12)


def partition_shapes(points: Sequence[Point]) -> dict[str, str]:
    """partition → marker shape, in order of first appearance; empty when the points name no
    partition."""
    parts = list(dict.fromkeys(p.partition for p in points if p.partition))
    return {name: SHAPES[i % len(SHAPES)] for i, name in enumerate(parts)}


def shape_legend(points: Sequence[Point]) -> list[dict[str, Any]]:
    return [
        {"name": name, "swatch": _marker(shape, 6, 6, 4)}
        for name, shape in partition_shapes(points).items()
    ]


def _log_ticks(lo: float, hi: float, fmt: Callable[[float], str]) -> list[tuple[float, str]]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [(10.0**k, fmt(10.0**k)) for k in range(a, b + 1)]


def comm_plot(
    points: Sequence[Point], y_label: str, fmt_bytes: Callable[[float], str]
) -> Plot | None:
    """Score against bytes per client on a log axis; runs that communicate nothing (local training,
    random init) sit in a separate "none" column left of the axis break."""
    if not points:
        return None
    plot = Plot(x_label="bytes up + down per client, whole run (log scale)", y_label=y_label)
    left, _, right, _ = plot.box
    positive = [p.x for p in points if p.x > 0]
    zero_col = any(p.x <= 0 for p in points)
    axis_left = left + (64 if zero_col else 0)
    if positive:
        # the axis spans the data (a fifth of a decade of margin), not the enclosing decades
        lo, hi = math.log10(min(positive)) - 0.2, math.log10(max(positive)) + 0.2
        ticks = [
            (v, t) for v, t in _log_ticks(10**lo, 10**hi, fmt_bytes) if lo <= math.log10(v) <= hi
        ]
        if len(ticks) < 2:  # less than a decade of data: label its ends instead
            ticks = [(v, fmt_bytes(v)) for v in sorted({min(positive), max(positive)})]
    else:
        ticks, lo, hi = [], 0.0, 1.0

    def xpos(x: float) -> float:
        if x <= 0:
            return left + 26
        return axis_left + 10 + (math.log10(x) - lo) / (hi - lo) * (right - axis_left - 20)

    ypos, yticks = _y_scale(points, plot.box)
    plot.xticks = [{"x": round(xpos(v), 1), "label": text} for v, text in ticks]
    if zero_col:
        plot.xticks.insert(0, {"x": left + 26, "label": "none"})
        plot.breaks = [axis_left - 6]
    plot.yticks = [{"y": round(ypos(v), 1), "label": f"{v:g}"} for v in yticks]
    plot.series = _series(points, xpos, ypos, connect=False)
    plot.shapes = shape_legend(points)
    direct_labels(plot)
    return plot


def alpha_settings(points: Sequence[Point]) -> list[float]:
    """The distinct α values (∞ = IID) the heterogeneity plot would show."""
    return sorted(
        {p.x for p in points if isinstance(p.x, float) and not math.isnan(p.x) and p.x > 0}
    )


def alpha_plot(points: Sequence[Point], y_label: str) -> Plot | None:
    """Score against the Dirichlet α on a log axis, IID at the right edge; each configuration's
    complete cells joined by a line, with its own colour and marker, named at its IID end. None
    below :data:`MIN_ALPHAS` partition settings."""
    points = [p for p in points if isinstance(p.x, float) and not math.isnan(p.x) and p.x > 0]
    if len(alpha_settings(points)) < MIN_ALPHAS:
        return None
    plot = Plot(x_label="Dirichlet α, log scale (smaller = more heterogeneous)", y_label=y_label)
    left, _, right, _ = plot.box
    finite = sorted({p.x for p in points if math.isfinite(p.x)})
    iid = any(math.isinf(p.x) for p in points)
    lo = math.log10(finite[0]) if finite else 0.0
    hi = math.log10(finite[-1]) if finite else 0.0
    iid_log = hi + 1 if finite else 0.0
    span_hi = iid_log if iid else hi
    span = span_hi - lo if span_hi > lo else 1.0

    def xpos(x: float) -> float:
        v = iid_log if math.isinf(x) else math.log10(x)
        return left + 24 + (v - lo) / span * (right - left - 48)

    ypos, yticks = _y_scale(points, plot.box)
    plot.xticks = [{"x": round(xpos(a), 1), "label": alpha_number(a)} for a in finite]
    if iid:
        plot.xticks.append({"x": round(xpos(math.inf), 1), "label": "IID"})
    plot.yticks = [{"y": round(ypos(v), 1), "label": f"{v:g}"} for v in yticks]
    plot.series = _series(points, xpos, ypos, connect=True, by_partition=False)
    direct_labels(plot)
    return plot
