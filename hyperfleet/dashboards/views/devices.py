"""Devices: a timeline of which trial held which device when, per host (and per worker where
several workers shared a host), with each device's utilisation and idle gaps, the stretches
PBT members spent paused and the resizes of elastic trials (see
:mod:`hyperfleet.dashboards.timeline`), and the workers that ran the sweep's trials."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from hyperfleet.dashboards import load, sizes, state, timeline
from hyperfleet.dashboards.format import duration, known_run
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.platform.storage import LeaseRecord, WorkerRecord


def _usage(data: SweepData, now: float) -> tuple[list[timeline.Bar], list[timeline.Bar]]:
    return timeline.bars(data.leases, now), timeline.pauses(data.leases, now, data.running)


def _table(uses: list[timeline.LaneUse]) -> pd.DataFrame:
    workers = any(u.worker for u in uses)
    return pd.DataFrame(
        [
            {
                "host · device": u.lane,
                "host": u.host,
                **({"worker": u.worker} if workers else {}),
                "busy": f"{u.utilisation:.0%}",
                "busy time": duration(u.busy_s),
                "leases": u.leases,
                "idle gaps": u.idle_gaps,
                "longest idle": duration(u.longest_idle_s) if u.idle_gaps else "none",
            }
            for u in uses
        ]
    ).set_index("host · device")


def _workers(workers: list[WorkerRecord], leases: list[LeaseRecord], now: float) -> pd.DataFrame:
    """One row per worker that held a lease of the sweep, as ``hyperfleet workers`` lists it."""
    count = {w.id: sum(1 for lease in leases if lease.worker == w.id) for w in workers}
    return pd.DataFrame(
        [
            {
                "worker": w.id,
                "host": w.host,
                "pool": w.pool,
                "devices": ", ".join(w.devices),
                "state": w.state,
                "heartbeat": f"{duration(max(0.0, now - w.heartbeat_at))} ago",
                "leases of this sweep": count[w.id],
            }
            for w in workers
        ]
    ).set_index("worker")


LEASED_HELP = "the share of the window the devices were leased to a trial, busy or not"
LOAD_HELP = (
    "the devices' mean utilisation while leased, from the system metrics the trials recorded "
    "in MLflow (a GPU's own, the host's CPU for a CPU device)"
)
# the device load is read over at most this many leases (the latest), a trial's run each; a
# comment, not a docstring: Streamlit's magic prints a page script's bare strings
LOAD_RUNS = 200


def _load(data: SweepData, now: float) -> str:
    runs = {n: run for n, r in data.records.items() if (run := known_run(r.mlflow_run_id))}
    if not runs:
        return "not recorded"
    uri = state.tracking_uri(state.settings(), data)
    leases = sorted(data.leases, key=lambda lease: lease.started_at)[-LOAD_RUNS:]
    found = load.sweep_load(leases, runs, lambda run: state.system_metrics(uri, run), now)
    return "not recorded" if found is None else f"{found:.0%}"


def _resize_line(resized: list[sizes.Launch]) -> str:
    """``3 resizes of 1 elastic trial, …: trial 0 1 → 2 → 4 → 2 devices``: under the timeline."""
    paths: dict[int, list[int]] = {}
    for x in resized:
        paths.setdefault(x.trial, [x.before or 0]).append(x.devices)
    trials = "; ".join(f"trial {n} {' → '.join(map(str, p))}" for n, p in sorted(paths.items()))
    count, many = len(resized), len(paths) > 1
    return (
        f"{count} resize{'s' if count > 1 else ''} of {len(paths)} elastic "
        f"trial{'s' if many else ''}, marked where each was relaunched at its new size "
        f"(▲ grew, ▼ shrank; a resized launch's lease ends PAUSED): {trials} devices"
    )


def body(url: str, name: str) -> None:
    data = state.sweep(url, name)
    st.title(f"Devices of {name}")
    state.freshness(data.fetched_at, data.running)
    if not data.leases:
        st.info(
            "No trial of this sweep has held a device yet (leases are recorded from "
            "hyperfleet's storage schema 2 on)."
        )
        return
    now = time.time()
    device_bars, pause_bars = _usage(data, now)
    start, end = timeline.window(data.leases, now)
    uses = timeline.utilisation(device_bars, start, end)
    hosts = sorted({b.host for b in device_bars})
    busy = sum(u.busy_s for u in uses) / max(1e-9, sum(u.window_s for u in uses))
    workers = {lease.worker or f"{lease.host}-{lease.pid}" for lease in data.leases}
    a, b, c, d, e, f = st.columns(6)
    a.metric("hosts", len(hosts))
    b.metric("workers", len(workers))
    c.metric("devices", len(uses))
    d.metric("leased time", f"{busy:.0%}", help=LEASED_HELP)
    e.metric("device load", _load(data, now), help=LOAD_HELP)
    f.metric("paused stretches", len(pause_bars))
    st.plotly_chart(timeline.figure(device_bars, pause_bars), width="stretch", key="timeline")
    resized = sizes.resizes(data.leases)
    if resized:
        st.caption(_resize_line(resized))
    st.subheader("Utilisation")
    st.caption(
        f"busy: leased time (held by a trial, working or not), over the sweep's window of "
        f"{duration(end - start)}, from the first lease to the "
        f"last one's end; idle gaps longer than {timeline.IDLE_MIN_S:g} s and "
        f"{timeline.IDLE_MIN_FRACTION:.0%} of the window"
    )
    st.table(_table(uses))
    if data.workers:
        st.subheader("Workers")
        st.caption("the `hyperfleet worker` processes that ran this sweep's trials")
        st.table(_workers(data.workers, data.leases, now))


def main() -> None:
    cfg = state.settings()
    name = st.session_state.get("sweep")
    if not name:
        st.title("Devices")
        st.info(f"No sweeps yet. Start one with `{state.START_HINT}`.")
        return
    running = state.sweep(cfg.storage, name).running
    state.live(lambda: body(cfg.storage, name), running, f"devices-{name}")


main()
