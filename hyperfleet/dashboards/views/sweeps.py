"""Sweeps: every sweep in the storage with its objective, scheduler, state, progress, best
value, running trials, start time and the devices it holds; a click on a row (or a link
below the table) opens a sweep."""

from __future__ import annotations

import time

import streamlit as st

from hyperfleet.dashboards import state
from hyperfleet.dashboards.format import number
from hyperfleet.dashboards.queries import SweepOverview
from hyperfleet.dashboards.tables import sweeps_frame
from hyperfleet.spec.states import SweepStatus

TABLE = "sweeps-table"  # its selection (a clicked row) opens the sweep


def _links(rows: list[SweepOverview]) -> None:
    st.subheader("Open a sweep")
    cols = st.columns(3)
    for i, r in enumerate(reversed(rows)):
        detail = f"{r.status} · {r.done}/{r.budget or '?'}"
        if r.best is not None:
            detail += f" · best {number(r.best)}"
        elif r.pareto is not None:
            detail += f" · {r.pareto} on the front"
        cols[i % 3].page_link(
            "views/sweep.py",
            label=f"{r.name} — {detail}",
            icon=":material/monitoring:",
            query_params={"sweep": r.name},
        )


def body(url: str) -> None:
    fetched = time.time()
    rows = state.sweeps(url)
    running = [r for r in rows if r.status == SweepStatus.RUNNING]
    st.title("Sweeps")
    state.freshness(fetched, True, "while this page is open")
    if not rows:
        st.info(f"No sweeps yet. Start one with `{state.START_HINT}`.")
        return
    a, b, c, d = st.columns(4)
    a.metric("sweeps", len(rows))
    b.metric("running sweeps", len(running))
    c.metric("running trials", sum(r.running for r in rows))
    d.metric("devices in use", sum(len(r.devices) for r in rows))
    frame = sweeps_frame(rows)
    event = st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        key=TABLE,
        on_select="rerun",
        selection_mode="single-row",
    )
    st.caption("Select a row (its box at the left) to open its sweep.")
    picked = event.selection.rows
    if picked:
        st.switch_page(
            "views/sweep.py", query_params={"sweep": str(frame["sweep"].iloc[picked[0]])}
        )
    _links(rows)


def main() -> None:
    cfg = state.settings()
    state.live(lambda: body(cfg.storage), True, "sweeps")  # sweeps start and end any time


main()
