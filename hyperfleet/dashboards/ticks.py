"""Readable tick labels on log axes.

Plotly labels a log axis with every 2 and 5 between the decades (``2 5 0.001 2 5 0.01 …``);
on Optuna's slice plot, where each parameter gets a narrow column, and on a contour spanning a
few decades those labels run into each other. :func:`readable_log_axes` replaces them with at
most a few ticks per axis, picked from 1-2-5, 1-3 or whole decades (every other decade over a
wide range), each labelled compactly (``0.001``, ``20``, ``1e-05``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import plotly.graph_objects as go

TICKS_ACROSS = 8
"""Ticks on an axis as wide as the whole figure; a narrower one gets its share (at least 2)."""

MANTISSAS = ((1, 2, 5), (1, 3), (1,))


def tick_label(value: float) -> str:
    """``0.001``, ``20``, ``5000``; ``1e-05`` and ``2e+06`` outside 1e-3 … 1e4."""
    if 1e-3 <= value < 1e4:
        return f"{value:g}"
    return f"{value:.0e}"


def log_ticks(low: float, high: float, most: int) -> list[float]:
    """At most ``most`` round values in ``[low, high]`` (both positive): the densest of 1-2-5,
    1-3 and whole decades (then every 2nd, 3rd … decade) that fits, never fewer than two."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    best: list[float] = []
    for every in range(1, max(2, last - first + 1)):
        for mantissas in MANTISSAS if every == 1 else ((1,),):
            values = (
                float(f"{m}e{e}")
                for e in range(first, last + 1)
                if (e - first) % every == 0
                for m in mantissas
            )
            ticks = [v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)]
            if len(ticks) <= most:
                return ticks if len(ticks) >= 2 or not best else best
            best = ticks
    return best[:: max(1, math.ceil(len(best) / most))]


def _axes(fig: go.Figure) -> Iterator[tuple[str, go.layout.XAxis | go.layout.YAxis]]:
    for name in fig.layout:
        if name.startswith(("xaxis", "yaxis")):
            yield name, fig.layout[name]


def _span(fig: go.Figure, name: str) -> tuple[float, float] | None:
    axis = fig.layout[name]
    if axis.range is not None and None not in axis.range:
        return 10.0 ** axis.range[0], 10.0 ** axis.range[1]
    letter, suffix = name[0], name[5:]
    ref = letter + suffix  # "xaxis2" -> traces on "x2"
    values = [
        float(v)
        for trace in fig.data
        if (getattr(trace, f"{letter}axis", None) or letter) == ref
        for v in (trace[letter] if trace[letter] is not None else ())
        if isinstance(v, (int, float)) and v > 0
    ]
    return (min(values), max(values)) if values else None


def readable_log_axes(fig: go.Figure) -> go.Figure:
    """Every log axis of ``fig`` with explicit ticks from :func:`log_ticks` (their number in
    proportion to the axis's share of the figure) and :func:`tick_label` labels."""
    for name, axis in list(_axes(fig)):
        if axis.type != "log":
            continue
        span = _span(fig, name)
        if span is None or span[0] >= span[1]:
            continue
        domain = axis.domain or (0.0, 1.0)
        most = max(2, round(TICKS_ACROSS * (domain[1] - domain[0])))
        ticks = log_ticks(span[0], span[1], most)
        axis.update(tickmode="array", tickvals=ticks, ticktext=[tick_label(t) for t in ticks])
    return fig
