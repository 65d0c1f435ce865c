"""What every page shares: the settings, the read-only storage, cached reads, the sweep picker
and live refresh.

Caching. A page's reads (:mod:`hyperfleet.dashboards.queries`) are cached for ``TTL_S``
seconds per storage and sweep, for all sessions at once: however many browser tabs are open
and however often they refresh, a running sweep's database serves each snapshot at most once
per ``TTL_S``. What is expensive to derive from a snapshot — the in-memory Optuna study, its
importance and plots — is cached by the snapshot's *fingerprint*, which changes only when a
trial finishes, so a refresh while trials merely report recomputes none of it.

Live refresh. While the sweep on a page is running, the page body is a Streamlit *fragment*
that reruns itself every few seconds (``st.fragment(run_every=...)``): only that fragment is
redrawn, in place, so the page does not flicker, scroll or lose the widgets' state; a caption
says how old the data is. A finished sweep is not refreshed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
import streamlit as st

from hyperfleet.dashboards import queries
from hyperfleet.dashboards.curves import Curve, CurveSource, open_curves
from hyperfleet.dashboards.format import known_run
from hyperfleet.dashboards.study import build_study
from hyperfleet.errors import HyperfleetError, StorageError
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import no_sweep
from hyperfleet.platform.urls import DEFAULT_STORAGE, local_tracking, rebased, started_from

TTL_S = 2.0
REFRESH_CHOICES = (2, 5, 10, 30)
START_HINT = "hyperfleet sweep run examples/quickstart.yaml"
_reported: set[str] = set()


@dataclass(frozen=True)
class Settings:
    """Where the dashboard reads from: ``--storage`` and ``--tracking-uri`` after ``--`` on
    the ``streamlit run`` line (``hyperfleet dashboard`` passes them), else the environment
    variables ``HYPERFLEET_STORAGE`` and ``HYPERFLEET_TRACKING_URI``."""

    storage: str
    tracking_uri: str | None


def settings() -> Settings:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--storage", default=os.environ.get("HYPERFLEET_STORAGE", DEFAULT_STORAGE))
    parser.add_argument("--tracking-uri", default=os.environ.get("HYPERFLEET_TRACKING_URI"))
    args, _ = parser.parse_known_args(sys.argv[1:])
    return Settings(storage=args.storage, tracking_uri=args.tracking_uri or None)


def report_once(message: str) -> None:
    """Print ``message`` on the server's stderr the first time it occurs."""
    if message not in _reported:
        _reported.add(message)
        print(f"hyperfleet dashboard: {message}", file=sys.stderr, flush=True)


@st.cache_resource(show_spinner=False)
def _open(url: str) -> Storage:
    return Storage.open_readonly(url)  # a failure is not cached: the next run tries again


def storage(url: str) -> Storage | None:
    """The read-only storage at ``url``, or None after showing why it cannot be read (on the
    page and, once, on stderr). Nothing is ever created."""
    try:
        return _open(url)
    except HyperfleetError as exc:
        report_once(str(exc))
        st.error(str(exc))
        st.info(f"Start a sweep with `{START_HINT}`; this page looks again every few seconds.")
        return None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweeps(url: str) -> list[queries.SweepOverview]:
    return queries.overview(_open(url))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweep(url: str, name: str) -> queries.SweepData:
    return queries.sweep_data(_open(url), name)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def population(url: str, name: str) -> queries.PopulationData:
    return queries.population(_open(url), name)


@st.cache_resource(max_entries=16, show_spinner=False)
def study(url: str, name: str, fingerprint: str, _data: queries.SweepData) -> optuna.Study:
    """The sweep's in-memory study; rebuilt only when ``fingerprint`` changes (shared, never
    modified by a page)."""
    return build_study(_data)


@st.cache_data(max_entries=128, show_spinner=False)
def derived(
    kind: str, url: str, name: str, fingerprint: str, args: tuple[Any, ...], _fn: Callable[[], Any]
) -> Any:
    """``_fn()`` — a figure or importance of one snapshot — cached by what it depends on:
    ``kind``, the sweep, its fingerprint and ``args`` (the objective, the parameters, ...)."""
    return _fn()


def tracking_uri(cfg: Settings, data: queries.SweepData) -> str:
    """``--tracking-uri``, else the sweep's ``tracking.uri``, else its default store (a
    relative one found from the directory the sweep was started in: :func:`local`)."""
    if cfg.tracking_uri:
        return cfg.tracking_uri
    return local(cfg, data, data.config.tracking.uri or local_tracking(data.config.workdir))


def local(cfg: Settings, data: queries.SweepData, location: str) -> str:
    """A path or SQLite URL the sweep stored relative to the directory it was started in,
    as this dashboard reaches it (which may run in another directory)."""
    return rebased(location, started_from(cfg.storage, data.config.storage_url))


@st.cache_resource(show_spinner=False)
def _curve_source(uri: str) -> CurveSource:
    return open_curves(uri)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _curves(uri: str, runs: tuple[tuple[int, str], ...], metric: str) -> dict[int, Curve]:
    return _curve_source(uri).histories(dict(runs), metric)


@st.cache_data(max_entries=256, show_spinner=False)
def _final_curves(uri: str, runs: tuple[tuple[int, str], ...], metric: str) -> dict[int, Curve]:
    return _curve_source(uri).histories(dict(runs), metric)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def system_metrics(uri: str, run: str) -> dict[str, Curve]:
    """A trial's system metrics as MLflow recorded them (see ``CurveSource.system``); empty
    when MLflow cannot be read (said once in the log: the pages' curves warn on screen, and
    the Devices page reads a run per lease)."""
    try:
        return _curve_source(uri).system(run)
    except StorageError as exc:
        report_once(str(exc))
        return {}


def curves(uri: str, data: queries.SweepData, trials: list[int], metric: str) -> dict[int, Curve]:
    """``metric``'s curves of ``trials``; empty after a caption saying why when MLflow cannot
    be read. Curves of finished trials no longer change: they are kept until evicted, so a
    live page does not read them again at every refresh."""
    runs = tuple(
        (n, known_run(data.records[n].mlflow_run_id) or "")
        for n in sorted(trials)
        if n in data.records
    )
    finished = all(data.records[n].state in queries.FINISHED for n, _ in runs)
    try:
        return (_final_curves if finished else _curves)(uri, runs, metric)
    except StorageError as exc:
        report_once(str(exc))
        st.warning(f"Learning curves come from MLflow, which cannot be read: {exc}")
        return {}


# -- the sweep picker and live refresh -------------------------------------------------------


def pick_sweep(names: list[str]) -> str | None:
    """The sidebar's sweep picker, kept in the URL (``?sweep=NAME``) so a link opens a sweep.

    A ``sweep`` query parameter that changed since the last run (a link was followed) wins
    over the picker; otherwise the picker wins and is written back to the URL.
    """
    if not names:
        return None
    wanted = st.query_params.get("sweep")
    if wanted in names and wanted != st.session_state.get("_url_sweep"):
        st.session_state["sweep"] = wanted
    elif wanted is not None and wanted not in names:  # a link or a typed URL with a typo
        st.sidebar.warning(no_sweep(wanted, names) + "; showing another one")
    if st.session_state.get("sweep") not in names:
        st.session_state["sweep"] = names[-1]
    chosen = st.sidebar.selectbox("Sweep", names, key="sweep")
    st.session_state["_url_sweep"] = chosen
    if st.query_params.get("sweep") != chosen:
        st.query_params["sweep"] = chosen
    return chosen


def live_controls() -> None:
    """Sidebar: live refresh on/off and its interval."""
    st.sidebar.toggle(
        "Live refresh",
        value=True,
        key="live",
        help="While a sweep runs, its pages redraw themselves.",
    )
    st.sidebar.select_slider("Every (s)", REFRESH_CHOICES, value=5, key="refresh_s")


def live(render: Callable[[], None], active: bool, key: str) -> None:
    """Run ``render`` as a fragment that reruns every few seconds while ``active`` (a sweep
    runs) and live refresh is on; once otherwise. :func:`freshness`, inside ``render``, reruns
    the whole page when ``active`` changed meanwhile, so a sweep that ends stops the refresh
    and one that starts begins it."""
    st.session_state[f"_active-{key}"] = active
    st.session_state["_live_key"] = key
    on = st.session_state.get("live", True)
    every = st.session_state.get("refresh_s", 5) if active and on else None
    st.fragment(render, run_every=every, key=key)()


def freshness(fetched_at: float, active: bool, while_: str = "while the sweep runs") -> None:
    """``updated N s ago`` and whether the page refreshes itself (see :func:`live`)."""
    key = st.session_state.get("_live_key")
    if key is not None and st.session_state.get(f"_active-{key}", active) != active:
        st.rerun(scope="app")
    age = max(0.0, time.time() - fetched_at)
    if active and st.session_state.get("live", True):
        how = f"refreshes every {st.session_state.get('refresh_s', 5)} s {while_}"
    elif active:
        how = "live refresh is off"
    else:
        how = "the sweep is not running: not refreshing"
    st.caption(f"updated {age:.0f} s ago · {how}")
