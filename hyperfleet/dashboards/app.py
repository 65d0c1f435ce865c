"""The hyperfleet dashboard (Streamlit, read-only): sweeps, their trials and learning curves.

Run with ``hyperfleet dashboard --storage URL``.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import streamlit as st

from hyperfleet.errors import StorageError
from hyperfleet.platform.results import summarize
from hyperfleet.platform.storage import Storage


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    default = os.environ.get("HYPERFLEET_STORAGE", "sqlite:///hyperfleet-runs/hyperfleet.db")
    parser.add_argument("--storage", default=default)
    args, _ = parser.parse_known_args(sys.argv[1:])
    return args


def _curves(storage: Storage, name: str) -> pd.DataFrame:
    """Intermediate objective values by step (Optuna-based sweeps keep them)."""
    import optuna

    if not storage.has_studies():
        return pd.DataFrame(columns=["trial", "step", "value"])
    try:
        study = optuna.load_study(study_name=name, storage=storage.optuna)
    except KeyError:  # a PBT sweep has no Optuna study
        return pd.DataFrame(columns=["trial", "step", "value"])
    rows = [
        {"trial": t.number, "step": step, "value": value}
        for t in study.get_trials(deepcopy=False)
        for step, value in t.intermediate_values.items()
    ]
    return pd.DataFrame(rows, columns=["trial", "step", "value"])


def main() -> None:
    args = _args()
    st.set_page_config(page_title="hyperfleet", layout="wide")
    st.title("hyperfleet")
    try:
        storage = Storage.open_readonly(args.storage)
    except StorageError as exc:
        st.info(f"No sweeps to show: {exc}. Start one with `hyperfleet sweep run FILE`.")
        return
    sweeps = [r.name for r in storage.list_sweeps()]
    if not sweeps:
        st.info(f"No sweeps in {args.storage} yet: run `hyperfleet sweep run FILE`.")
        return
    name = st.sidebar.selectbox("Sweep", sweeps, index=len(sweeps) - 1)
    summary = summarize(storage, name)
    counts = summary.state_counts
    cols = st.columns(len(counts))
    for col, (state, n) in zip(cols, counts.items(), strict=True):
        col.metric(state, n)
    table = pd.DataFrame(
        [
            {
                "trial": t.number,
                "state": t.state,
                **dict(zip(summary.metrics, t.values or [], strict=False)),
                **t.params,
            }
            for t in summary.trials
        ]
    )
    st.subheader("Trials")
    st.dataframe(table, use_container_width=True)
    curves = _curves(storage, name)
    if not curves.empty:
        st.subheader("Objective by step")
        st.line_chart(curves, x="step", y="value", color="trial")


main()
