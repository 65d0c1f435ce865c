"""The family tree of a PBT/PB2 population: members as lanes over steps, exploits as edges.

Population-based training trains every member on its own lane until a ready check finds it
in the bottom quantile; it then *exploits* — copies the weights of a donor, as they were in
the donor's checkpoint at ``donor_step`` — and *explores* — perturbs the donor's
hyperparameters. The member goes on training from ``donor_step`` with the explored values, so
its lane *jumps* from the step where it decided to the donor's step (forward when the donor
was ahead, back when it was behind).

The tree is drawn from the stored lineage alone (``hf_lineage``, one exploit and one explore
per generation of a member, in the order they were written):

* a **segment** per stretch a member trained with one set of hyperparameters: from step 0
  (its initial values) or from the ``donor_step`` of its last exploit, to its next exploit's
  step or to the step it holds now;
* an **edge** per exploit, from the donor's lane at ``donor_step`` to the member's lane at
  the same step — the weights the member continues from;
* the **ancestry** of a member: its last segment, then the donor's lane up to the step it was
  copied at, then that donor's donor, back to some member's step 0. The hyperparameters along
  it are the schedule ``hyperfleet sweep replay`` re-runs (``replay_schedule``), which is the
  winning member's full schedule when drawn for the winner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from hyperfleet.dashboards.format import number, params_text
from hyperfleet.dashboards.queries import PopulationData
from hyperfleet.platform.storage.population import LineageEvent

MAX_LABELS = 60
"""Above this many segments the parameters are shown on hover only, not as text."""
LABEL_CHAR_PX = 6.5
"""Width of one character of a lane's parameter label (10 px font)."""
PLOT_PX = 900
"""The narrowest plot width the labels are spaced for (a wide page's chart is wider)."""


def label_steps(text: str, first: float, last: float) -> float:
    """How many steps ``text`` covers on a lane drawn from step ``first`` to ``last``."""
    return len(text) * LABEL_CHAR_PX * max(1.0, last - first) / PLOT_PX


def spaced_labels(segs: Sequence[Segment]) -> list[str]:
    """Each segment's parameter label, or ``""`` where it would run into the label before it
    on the same lane (labels start at the segment's start and run right)."""
    texts = [_short(s.params) for s in segs]
    first = min((s.start for s in segs), default=0)
    last = max((s.end for s in segs), default=0)
    shown = [""] * len(segs)
    free: dict[int, float] = {}  # lane -> the first step after its last label
    for i in sorted(range(len(segs)), key=lambda i: (segs[i].member, segs[i].start)):
        s = segs[i]
        if s.start >= free.get(s.member, -math.inf):
            shown[i] = texts[i]
            free[s.member] = s.start + label_steps(texts[i], first, last)
    return shown


@dataclass(frozen=True)
class Segment:
    member: int
    start: int
    end: int
    params: dict[str, Any]
    generation: int
    donor: int | None = None  # whose weights the segment started from (None: its own)


@dataclass(frozen=True)
class Edge:
    donor: int
    donor_step: int
    member: int
    step: int  # the member's step when it decided to exploit
    generation: int


def _after(events: Sequence[LineageEvent], member: int) -> dict[int, dict[str, Any]]:
    """Each generation's params after explore (exploit's copy when there was no explore)."""
    out: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.member == member and (e.kind == "explore" or e.generation not in out):
            out[e.generation] = dict(e.new_params)
    return out


def segments(pop: PopulationData) -> list[Segment]:
    """Every member's training stretches, member by member, in time order."""
    out = []
    for number_, m in sorted(pop.members.items()):
        after = _after(pop.events, number_)
        start, params, generation, donor = 0, dict(m.initial), 0, None
        for e in (e for e in pop.exploits if e.member == number_):
            out.append(Segment(number_, start, max(start, e.step), params, generation, donor))
            start, generation, donor = e.donor_step, e.generation, e.donor
            params = after.get(e.generation, dict(e.new_params))
        out.append(Segment(number_, start, max(start, m.step), params, generation, donor))
    return out


def edges(pop: PopulationData) -> list[Edge]:
    """One edge per stored exploit, in the order they were written."""
    return [Edge(e.donor, e.donor_step, e.member, e.step, e.generation) for e in pop.exploits]


def ancestry(pop: PopulationData, member: int) -> list[Segment]:
    """The stretches that produced ``member``'s current weights, newest first (see the
    module docstring); the same walk as ``replay_schedule``."""
    if member not in pop.members:
        return []
    out: list[Segment] = []
    current, before, end = member, math.inf, pop.members[member].step
    while True:
        earlier = [e for e in pop.exploits if e.member == current and e.seq < before]
        if not earlier:
            out.append(Segment(current, 0, end, dict(pop.members[current].initial), 0))
            return out
        e = max(earlier, key=lambda e: e.seq)
        params = _after(pop.events, current).get(e.generation, dict(e.new_params))
        out.append(
            Segment(current, e.donor_step, max(end, e.donor_step), params, e.generation, e.donor)
        )
        current, before, end = e.donor, e.seq, e.donor_step


def _lines(pairs: Sequence[tuple[tuple[float, float], tuple[float, float]]]) -> tuple[list, list]:
    """x and y of many two-point lines in one trace (None separates them)."""
    xs: list[Any] = []
    ys: list[Any] = []
    for (x0, y0), (x1, y1) in pairs:
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return xs, ys


def _colour(segs: Sequence[Segment], param: str | None, log: bool) -> list[float] | None:
    if param is None:
        return None
    values = []
    for s in segs:
        v = s.params.get(param)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or (log and v <= 0):
            values.append(math.nan)
        else:
            values.append(math.log10(v) if log else float(v))
    return values


def _line_trace(
    pairs: Sequence[tuple[tuple[float, float], tuple[float, float]]], name: str, **style: Any
) -> go.Scatter:
    xs, ys = _lines(pairs)
    return go.Scatter(x=xs, y=ys, mode="lines", name=name, hoverinfo="skip", **style)


def figure(
    pop: PopulationData, winner: int | None = None, colour_by: str | None = None, log: bool = False
) -> go.Figure:
    """Lanes, jumps, exploit edges, the winner's ancestry and a marker at every segment's start
    coloured by ``colour_by`` (log10 of it when ``log``), its parameters on hover."""
    segs = segments(pop)
    fig = go.Figure()
    lanes = [((s.start, s.member), (s.end, s.member)) for s in segs]
    fig.add_trace(_line_trace(lanes, "training", line={"color": "#7b8794", "width": 2}))
    jumps = [((e.step, e.member), (e.donor_step, e.member)) for e in edges(pop)]
    dotted = {"color": "#bcccdc", "dash": "dot"}
    fig.add_trace(_line_trace(jumps, "jump to the donor's step", line=dotted))
    if winner is not None:
        path = ancestry(pop, winner)
        pairs = [((s.start, s.member), (s.end, s.member)) for s in path]
        pairs += [((s.start, s.donor), (s.start, s.member)) for s in path if s.donor is not None]
        wide = {"color": "#f0b429", "width": 7}
        fig.add_trace(_line_trace(pairs, f"member {winner}'s ancestry", line=wide, opacity=0.55))
    fig.add_trace(_edge_trace(edges(pop)))
    fig.add_trace(_start_markers(segs, colour_by, log))
    members = sorted(pop.members)
    ticks = [f"member {m}" for m in members]
    fig.update_yaxes(title="member", tickvals=members, ticktext=ticks, autorange="reversed")
    fig.update_xaxes(title="step")
    fig.update_layout(
        title={"text": "Family tree", "x": 0.0},
        height=max(320, 70 * len(members) + 120),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def _edge_trace(es: Sequence[Edge]) -> go.Scatter:
    xs, ys = _lines([((e.donor_step, e.donor), (e.donor_step, e.member)) for e in es])
    sizes = [0, 13, 0] * len(es)
    text = [
        f"member {e.member} copies member {e.donor} at step {e.donor_step} "
        f"(decided at step {e.step}, generation {e.generation})"
        for e in es
    ]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines+markers",
        name="exploit (donor → member)",
        line={"color": "#d64545", "width": 1.8},
        marker={"symbol": "arrow", "angleref": "previous", "size": sizes, "color": "#d64545"},
        hovertext=[t for t in text for _ in range(3)],
        hoverinfo="text",
        customdata=[[e.donor, e.donor_step, e.member, e.step] for e in es for _ in range(3)],
    )


def _start_markers(segs: Sequence[Segment], colour_by: str | None, log: bool) -> go.Scatter:
    colours = _colour(segs, colour_by, log)
    labels = [params_text(s.params) for s in segs]
    hover = [
        f"member {s.member} from step {s.start}"
        + (f" (weights of member {s.donor})" if s.donor is not None else " (initial)")
        + f"<br>{labels[i]}"
        for i, s in enumerate(segs)
    ]
    marker: dict[str, Any] = {"size": 10, "line": {"width": 1, "color": "white"}}
    if colours is not None:
        title = f"log10 {colour_by}" if log else str(colour_by)
        marker.update(
            color=colours,
            colorscale="Viridis",
            showscale=True,
            colorbar={"title": {"text": title}, "thickness": 12},
        )
    show_text = len(segs) <= MAX_LABELS
    return go.Scatter(
        x=[s.start for s in segs],
        y=[s.member for s in segs],
        mode="markers+text" if show_text else "markers",
        text=spaced_labels(segs) if show_text else None,
        textposition="top right",
        textfont={"size": 10},
        name="hyperparameters from here",
        marker=marker,
        hovertext=hover,
        hoverinfo="text",
    )


def _short(params: dict[str, Any]) -> str:
    return " · ".join(f"{k} {number(v)}" for k, v in params.items())
