"""The device timeline: which trial held which device when, per host, and how busy each was.

Every launch of a trial records a lease (``hf_leases``): the worker's host and pid, the
devices, when it started and ended and how it ended (COMPLETE, PRUNED, FAIL, PAUSED, …; an
open lease is a trial running now). A trial paused by PBT time-sharing gives its devices back
and gets a new lease when it resumes, so it has several.

* A **bar** is one device of one lease: a lane per ``host · device`` — per
  ``host · worker · device`` on a host where several workers (``hyperfleet worker``
  processes, each with devices of its own) ran the sweep's trials, so two workers' ``cpu:0``
  slots are two lanes. A device shared among small trials (``trial.resources.per_device``)
  has a lane per share, ``host · device · share i``, so trials that held it together show
  side by side instead of over each other.
* A **pause** is the time between a PAUSED lease's end and the same trial's next lease (or
  now, or the end of the sweep): a lane per paused trial, so members waiting for a device
  show beside the devices they wait for.
* **Utilisation** of a lane is the time covered by its bars over the sweep's window (first
  lease start to last lease end, or now while one is open) — the same window for every lane,
  so an idle device reads low. An **idle gap** is a stretch of the window no bar covers, longer
  than ``IDLE_MIN_S`` and ``IDLE_MIN_FRACTION`` of the window (scheduling latency between two
  trials is not idleness worth reading).
* A **resize** of an elastic trial is a relaunch at another number of devices
  (:mod:`~hyperfleet.dashboards.sizes`): each bar's hover says its launch's size
  (``2 devices (resized from 1)``), and a marker at the start of each bar of a resized launch
  says which way it went (▲ grew, ▼ shrank).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from hyperfleet.dashboards.sizes import devices_text, launches
from hyperfleet.platform.storage import LeaseRecord
from hyperfleet.spec.states import TrialState

IDLE_MIN_S = 1.0
IDLE_MIN_FRACTION = 0.02
COLOURS = {
    TrialState.RUNNING: "#2f80ed",
    TrialState.COMPLETE: "#27ae60",
    TrialState.PAUSED: "#f2994a",
    TrialState.PRUNED: "#9aa5b1",
    TrialState.FAIL: "#eb5757",
    TrialState.WAITING: "#bb6bd9",
    "paused": "#fcd9b6",
}
RESIZE_COLOUR = "#1f2933"
RESIZE_MARKERS = {"grew": "triangle-up", "shrank": "triangle-down"}


@dataclass(frozen=True)
class Bar:
    lane: str
    host: str
    device: str  # "" for a pause lane
    trial: int
    start: float
    end: float
    state: str  # how the lease ended; RUNNING while open; "paused" for a pause
    worker: str = ""  # the worker's label on a host with several workers, else ""
    share: int = 0  # the lane's share of a device shared ``of`` ways (0 of 1: held whole)
    of: int = 1
    devices: int = 0  # the devices of the bar's launch (0 for a pause)
    resized_from: int | None = None  # the trial's devices before, when this launch resized it

    @property
    def size(self) -> str:
        """The launch's size as the hover says it; "" for a pause."""
        return devices_text(self.devices, self.resized_from) if self.devices else ""


@dataclass(frozen=True)
class LaneUse:
    lane: str
    busy_s: float
    window_s: float
    leases: int
    idle_gaps: int
    longest_idle_s: float
    host: str = ""
    worker: str = ""

    @property
    def utilisation(self) -> float:
        return self.busy_s / self.window_s if self.window_s > 0 else 0.0


def worker_label(lease: LeaseRecord) -> str:
    """A worker as a lane names it: its id without the host (``pid-suffix``), else its pid."""
    if lease.worker:
        return "worker " + lease.worker.removeprefix(f"{lease.host}-")
    return f"worker {lease.pid}"


def _shared_hosts(leases: Sequence[LeaseRecord]) -> set[str]:
    """Hosts on which more than one worker held the leases."""
    seen: dict[str, set[str]] = {}
    for lease in leases:
        seen.setdefault(lease.host, set()).add(lease.worker or str(lease.pid))
    return {host for host, workers in seen.items() if len(workers) > 1}


def bars(leases: Sequence[LeaseRecord], now: float) -> list[Bar]:
    """One bar per device of each lease; an open lease runs until ``now``."""
    shared = _shared_hosts(leases)
    launch = {lease: x for x in launches(leases) for lease in x.leases}
    out = []
    for lease in leases:
        end = lease.ended_at if lease.ended_at is not None else now
        state = lease.state or (TrialState.RUNNING if lease.ended_at is None else "ENDED")
        worker = worker_label(lease) if lease.host in shared else ""
        prefix = f"{lease.host} · {worker}" if worker else lease.host
        suffix = f" · share {lease.share}" if lease.per_device > 1 else ""
        size = launch[lease.id]
        for device in lease.devices or ["(no device)"]:
            out.append(
                Bar(
                    f"{prefix} · {device}{suffix}",
                    lease.host,
                    device,
                    lease.trial,
                    lease.started_at,
                    max(end, lease.started_at),
                    state,
                    worker,
                    lease.share,
                    lease.per_device,
                    size.devices,
                    size.before if size.resized else None,
                )
            )
    return out


def window(leases: Sequence[LeaseRecord], now: float) -> tuple[float, float]:
    """First lease start to last lease end (``now`` while a lease is open)."""
    if not leases:
        return now, now
    start = min(lease.started_at for lease in leases)
    end = max(now if lease.ended_at is None else lease.ended_at for lease in leases)
    return start, end


def pauses(leases: Sequence[LeaseRecord], now: float, running: bool) -> list[Bar]:
    """The stretches each trial spent paused (see the module docstring)."""
    _, end_of_sweep = window(leases, now)
    out = []
    by_trial: dict[int, list[LeaseRecord]] = {}
    for lease in sorted(leases, key=lambda x: x.started_at):
        by_trial.setdefault(lease.trial, []).append(lease)
    for trial, ls in sorted(by_trial.items()):
        for i, lease in enumerate(ls):
            if lease.state != TrialState.PAUSED or lease.ended_at is None:
                continue
            resumed = (
                ls[i + 1].started_at if i + 1 < len(ls) else (now if running else end_of_sweep)
            )
            if resumed > lease.ended_at:
                out.append(
                    Bar(
                        f"paused · trial {trial}",
                        lease.host,
                        "",
                        trial,
                        lease.ended_at,
                        resumed,
                        "paused",
                    )
                )
    return out


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def utilisation(device_bars: Sequence[Bar], start: float, end: float) -> list[LaneUse]:
    """Busy time, idle gaps and lease count of each device lane over ``[start, end]``."""
    span = max(0.0, end - start)
    threshold = max(IDLE_MIN_S, IDLE_MIN_FRACTION * span)
    lanes: dict[str, list[Bar]] = {}
    for b in device_bars:
        lanes.setdefault(b.lane, []).append(b)
    out = []
    for lane, bs in sorted(lanes.items()):
        busy = _merged([(max(b.start, start), min(b.end, end)) for b in bs])
        edges = [start] + [x for interval in busy for x in interval] + [end]
        gaps = [edges[i + 1] - edges[i] for i in range(0, len(edges), 2)]
        idle = [g for g in gaps if g > threshold]
        busy_s, longest = sum(e - s for s, e in busy), max(idle, default=0.0)
        out.append(
            LaneUse(lane, busy_s, span, len(bs), len(idle), longest, bs[0].host, bs[0].worker)
        )
    return out


def figure(device_bars: Sequence[Bar], pause_bars: Sequence[Bar]) -> go.Figure:
    """A Gantt chart: device lanes (sorted by host, device), then pause lanes."""
    rows = [
        {
            "lane": b.lane,
            "start": dt.datetime.fromtimestamp(b.start),
            "end": dt.datetime.fromtimestamp(b.end),
            "trial": f"t{b.trial}",
            "state": b.state,
            "seconds": round(b.end - b.start, 2),
            "size": b.size,
        }
        for b in [*device_bars, *pause_bars]
    ]
    columns = ["lane", "start", "end", "trial", "state", "seconds", "size"]
    frame = pd.DataFrame(rows, columns=columns)
    lanes = sorted({b.lane for b in device_bars}) + sorted(
        {b.lane for b in pause_bars}, key=lambda lane: int(lane.rsplit(" ", 1)[-1])
    )
    fig = px.timeline(
        frame,
        x_start="start",
        x_end="end",
        y="lane",
        color="state",
        text="trial",
        hover_data={"trial": True, "size": True, "seconds": True, "state": True, "lane": False},
        color_discrete_map=COLOURS,
        category_orders={"lane": lanes},
    )
    fig.update_traces(textposition="inside", insidetextanchor="middle")
    for trace in resize_markers(device_bars):
        fig.add_trace(trace)
    fig.update_layout(
        title={"text": "Device timeline", "x": 0.0},
        height=max(260, 34 * len(lanes) + 140),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis_title="wall clock",
        yaxis_title=None,
        legend_title_text="lease ended",
    )
    return fig


def resize_markers(device_bars: Sequence[Bar]) -> list[go.Scatter]:
    """A marker at the start of each bar of a resized launch, on its lane: ▲ where the trial
    grew, ▼ where it shrank (one trace each, none without a resize)."""
    found: dict[str, list[Bar]] = {"grew": [], "shrank": []}
    for b in device_bars:
        if b.resized_from is not None:
            found["grew" if b.devices > b.resized_from else "shrank"].append(b)
    return [
        go.Scatter(
            x=[dt.datetime.fromtimestamp(b.start) for b in bs],
            y=[b.lane for b in bs],
            mode="markers",
            name=f"resize: {way}",
            marker={"symbol": RESIZE_MARKERS[way], "size": 11, "color": RESIZE_COLOUR},
            text=[f"trial {b.trial} {way}: {b.resized_from} → {b.devices} devices" for b in bs],
            hovertemplate="%{text}<br>%{x}<extra></extra>",
        )
        for way, bs in found.items()
        if bs
    ]
