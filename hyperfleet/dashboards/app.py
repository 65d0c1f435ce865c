"""The hyperfleet dashboard (Streamlit, read-only): sweeps, trials, analysis, PBT populations
and devices.

Start it with ``hyperfleet dashboard --storage URL [--tracking-uri URI]``, which runs
``streamlit run`` on this file. Pages (``views/``):

* **Sweeps** — every sweep at a glance; one click into a sweep (at ``/`` and ``/sweeps``);
* **Sweep** — the trials table, progress, learning curves, Pareto front, what matters;
* **Compare** — 2 to 8 trials side by side: the params that differ, their curves;
* **Population** — a PBT/PB2 sweep's family tree and the winner's schedule;
* **Devices** — which trial held which device when, and how busy each was.

Nothing here writes: storage is opened read-only (a missing database is reported, never
created) and MLflow is only read.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from hyperfleet.dashboards import state
from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import masked

VIEWS = Path(__file__).resolve().parent / "views"


def _pages() -> list[st.Page]:
    sweeps = str(VIEWS / "sweeps.py")
    return [
        st.Page(
            sweeps, title="Sweeps", icon=":material/table_view:", url_path="home", default=True
        ),
        # the default page is served at the root only: ``/sweeps`` is the same page, unlisted
        st.Page(sweeps, title="Sweeps", url_path="sweeps", visibility="hidden"),
        st.Page(
            str(VIEWS / "sweep.py"), title="Sweep", icon=":material/monitoring:", url_path="sweep"
        ),
        st.Page(
            str(VIEWS / "compare.py"),
            title="Compare",
            icon=":material/compare_arrows:",
            url_path="compare",
        ),
        st.Page(
            str(VIEWS / "population.py"),
            title="Population",
            icon=":material/account_tree:",
            url_path="population",
        ),
        st.Page(
            str(VIEWS / "devices.py"), title="Devices", icon=":material/memory:", url_path="devices"
        ),
    ]


def _wait_for_storage(url: str) -> None:
    """Look for the storage again every few seconds; rerun the app once it can be read."""

    def look() -> None:
        try:
            state._open(url)
        except Exception:  # noqa: BLE001 - still missing: the page already says why
            return
        st.rerun(scope="app")

    st.fragment(look, run_every=5, key="wait-for-storage")()


def main() -> None:
    st.set_page_config(page_title="hyperfleet", page_icon=":material/monitoring:", layout="wide")
    cfg = state.settings()
    nav = st.navigation(_pages())
    st.sidebar.caption(f"storage: `{masked(cfg.storage)}`")
    storage = state.storage(cfg.storage)
    if storage is None:
        _wait_for_storage(cfg.storage)
        return
    try:
        state.pick_sweep([r.name for r in state.sweeps(cfg.storage)])
        state.live_controls()
        nav.run()
    except ConfigError as exc:  # a stored sweep this version cannot read: one line, no trace
        state.report_once(str(exc))
        st.error(str(exc))


main()
