"""Value axes on a log scale: by the user's switch, or by themselves when values span decades.

One trial that diverges (a loss of 1e13 beside losses near 0.1) flattens every other value
onto the bottom of a linear axis. Each chart of values (objective values, metrics, learning
curves) therefore has a scale switch with three positions:

* ``auto`` (the default): logarithmic when every value is positive and the largest is more
  than ``10**DECADES`` times the smallest, linear otherwise; the chart's caption says when
  the log scale came on by itself;
* ``linear`` and ``log``: the user's choice, which overrides the automatic one. A log scale
  asked for values that are not all positive stays linear, and the caption says why (a log
  axis would silently drop them).

Where a chart's values are not on an x or y axis, the values themselves are drawn as their
``log10`` with ticks labelled in real values: the colour of a contour or heatmap
(:func:`colour`) and the objective's axis of parallel coordinates
(:func:`hyperfleet.dashboards.charts.parallel`, deciding with :func:`decide`).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from hyperfleet.dashboards.ticks import log_ticks, readable_log_axes, tick_label

AUTO, LINEAR, LOG = "auto", "linear", "log"
CHOICES = (AUTO, LINEAR, LOG)
DECADES = 3.0
"""Values spanning more decades than this get a log scale by themselves."""


@dataclass(frozen=True)
class Scale:
    """What a chart's value axis became, and why."""

    log: bool
    automatic: bool = False  # the values chose it, not the switch
    decades: float | None = None  # how many decades the positive values span
    what: str = "the values"
    refused: bool = False  # log asked for, but some values are not positive

    @property
    def caption(self) -> str | None:
        """The chart's caption when the scale needs saying: set automatically, or refused."""
        if self.refused:
            return (
                f"log scale not drawn: {self.what} has values ≤ 0, which a log axis cannot "
                f"show; linear scale"
            )
        if self.automatic and self.decades is not None:
            return (
                f"log scale, set automatically: {self.what} spans {self.decades:.0f} decades "
                f"(the scale switch overrides it)"
            )
        return None


def _finite(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def span(values: Iterable[Any]) -> float | None:
    """How many decades the finite ``values`` span; None when one is not positive or none
    is given."""
    numbers = _finite(values)
    if not numbers or min(numbers) <= 0:
        return None
    return math.log10(max(numbers) / min(numbers))


def decide(values: Iterable[Any], choice: str, what: str = "the values") -> Scale:
    """The scale of ``values`` under the switch's ``choice`` (module docstring)."""
    decades = span(values)
    if choice == LINEAR:
        return Scale(False, decades=decades, what=what)
    if choice == LOG:
        if decades is None:
            return Scale(False, what=what, refused=bool(_finite(values)))
        return Scale(True, decades=decades, what=what)
    automatic = decades is not None and decades > DECADES
    return Scale(automatic, automatic=automatic, decades=decades, what=what)


def array(data: Any) -> Any:
    """A trace's data as a list (of rows, for ``z``): a figure read back from a cache holds
    plotly's typed arrays (``{"dtype": "f8", "bdata": base64, "shape": "2, 3"}``)."""
    if isinstance(data, dict) and "bdata" in data:
        flat = np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
        shape = data.get("shape")
        if shape:
            flat = flat.reshape([int(n) for n in str(shape).split(",")])
        return flat.tolist()
    return data


def _axis_values(fig: go.Figure, letter: str) -> list[Any]:
    values: list[Any] = []
    for trace in fig.data:
        data = array(trace[letter]) if letter in trace else None
        if data is not None:
            values.extend(data)
    return values


def axis(fig: go.Figure, letter: str, choice: str, what: str = "the values") -> Scale:
    """Every ``letter`` axis (``"x"``, ``"y"``, each subplot's, or a 3-D scene's ``"z"``) of
    ``fig`` on the scale its traces' values and ``choice`` decide; log axes get readable
    ticks."""
    scale = decide(_axis_values(fig, letter), choice, what)
    if any(t.type == "scatter3d" for t in fig.data):  # a 3-objective front: the scene's axes
        axes = [fig.layout.scene[f"{letter}axis"]]
    else:
        names = [n for n in fig.layout if n.startswith(f"{letter}axis")] or [f"{letter}axis"]
        axes = [fig.layout[name] for name in names]
    for found in axes:
        found.type = "log" if scale.log else "linear"
        if scale.log:
            found.range = None  # a range set for linear values means nothing on log
    if scale.log:
        readable_log_axes(fig)
    return scale


def _log10(values: Iterable[Any]) -> list[float | None]:
    out: list[float | None] = []
    for v in values:
        ok = isinstance(v, (int, float)) and math.isfinite(v) and v > 0
        out.append(math.log10(v) if ok else None)
    return out


def log10_ticks(logged: Iterable[float | None]) -> tuple[list[float], list[str]]:
    """Round real values for an axis drawn in log10 units: their positions and labels."""
    present = [v for v in logged if v is not None]
    if not present or min(present) == max(present):
        return [], []
    ticks = log_ticks(10 ** min(present), 10 ** max(present), 6)
    return [math.log10(t) for t in ticks], [tick_label(t) for t in ticks]


def colour(fig: go.Figure, choice: str, what: str = "the values") -> Scale:
    """The colour of every contour and heatmap of ``fig`` as ``log10`` of its values when the
    scale is log, the colour bar labelled in real values."""
    surfaces = [t for t in fig.data if t.type in ("contour", "heatmap")]
    rows = {id(t): array(t.z) if t.z is not None else [] for t in surfaces}
    values = [z for t in surfaces for row in rows[id(t)] for z in row]
    scale = decide(values, choice, what)
    if not scale.log:
        return scale
    for trace in surfaces:
        logged = [_log10(row) for row in rows[id(trace)]]
        vals, text = log10_ticks(v for row in logged for v in row)
        title = trace.colorbar.title.text or what
        trace.update(z=logged, zmin=None, zmax=None)
        trace.colorbar.update(tickvals=vals, ticktext=text, title={"text": f"{title} (log)"})
    return scale
