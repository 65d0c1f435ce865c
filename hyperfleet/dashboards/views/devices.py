"""Devices: a timeline of which trial held which device when, per host, with each device's
utilisation and idle gaps, and the stretches PBT members spent paused (see
:mod:`hyperfleet.dashboards.timeline`)."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from hyperfleet.dashboards import state, timeline
from hyperfleet.dashboards.format import duration
from hyperfleet.dashboards.queries import SweepData


def _usage(data: SweepData, now: float) -> tuple[list[timeline.Bar], list[timeline.Bar]]:
    return timeline.bars(data.leases, now), timeline.pauses(data.leases, now, data.running)


def _table(uses: list[timeline.LaneUse]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "host · device": u.lane,
                "busy": f"{u.utilisation:.0%}",
                "busy time": duration(u.busy_s),
                "leases": u.leases,
                "idle gaps": u.idle_gaps,
                "longest idle": duration(u.longest_idle_s) if u.idle_gaps else "none",
            }
            for u in uses
        ]
    ).set_index("host · device")


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
    a, b, c, d = st.columns(4)
    a.metric("hosts", len(hosts))
    b.metric("devices", len(uses))
    c.metric("utilisation", f"{busy:.0%}")
    d.metric("paused stretches", len(pause_bars))
    st.plotly_chart(timeline.figure(device_bars, pause_bars), width="stretch", key="timeline")
    st.subheader("Utilisation")
    st.caption(
        f"over the sweep's window of {duration(end - start)}, from the first lease to the "
        f"last one's end; idle gaps longer than {timeline.IDLE_MIN_S:g} s and "
        f"{timeline.IDLE_MIN_FRACTION:.0%} of the window"
    )
    st.table(_table(uses))


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
