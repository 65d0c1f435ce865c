"""Every page of the dashboard, run by Streamlit's own script runner (``AppTest``) against the
session's real sweeps (:mod:`tests.dashboards.sweeps`): no exception, and the elements each
page promises — checked against what the platform stored and what ``sweep status`` prints.
The pages on no storage, no sweep and no finished trial: :mod:`tests.dashboards.test_empty`."""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from streamlit.testing.v1 import AppTest

from hyperfleet.dashboards import tree
from hyperfleet.dashboards.analysis import POPULATION_REASON
from hyperfleet.dashboards.charts import trial_colour
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore, replay_schedule
from hyperfleet.platform.storage.results import summarize
from hyperfleet.spec.states import TrialState
from tests.dashboards.sweeps import DIVERGED, FAILING, MULTI, NAMES, PBT, TPE, Filled
from tests.integration.cli import cli

pytestmark = pytest.mark.slow  # the session's real sweeps (tests.dashboards.sweeps) run first
APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"
Open = Callable[..., AppTest]
COMPLETE, PRUNED = TrialState.COMPLETE, TrialState.PRUNED
SWEEPS_TABLE = "sweeps-table"  # the key of the Sweeps page's table


@pytest.fixture
def open_page(filled: Filled, monkeypatch: pytest.MonkeyPatch) -> Open:
    """``open_page(view, sweep)``: the app run on ``views/<view>.py`` with ``sweep`` picked."""
    monkeypatch.setenv("HYPERFLEET_STORAGE", filled.storage)
    monkeypatch.delenv("HYPERFLEET_TRACKING_URI", raising=False)

    def run(view: str, sweep: str | None = None, **state: Any) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        assert not at.exception, at.exception
        if sweep is not None:
            at.session_state["sweep"] = sweep
        for key, value in state.items():
            at.session_state[key] = value
        if view != "sweeps":
            at.switch_page(f"views/{view}.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


def figures(at: AppTest) -> dict[str, dict[str, Any]]:
    """The page's plotly figures (as plotly JSON) by the key they were drawn with."""
    return {e.proto.id.split("-", 2)[2]: json.loads(e.proto.spec) for e in at.get("plotly_chart")}


def array(data: Any) -> list[float]:
    """A plotly JSON array: a list, or a typed array (``{"dtype": "f8", "bdata": base64}``)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def stored(filled: Filled) -> Storage:
    return Storage.open_readonly(filled.storage)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("view", ["sweep", "compare", "population", "devices"])
def test_every_page_runs_on_every_sweep(open_page: Open, view: str) -> None:
    for sweep in NAMES:
        at = open_page(view, sweep)  # asserts no exception
        assert at.title[0].value.endswith(sweep), (view, sweep)


# -- Sweeps ------------------------------------------------------------------------------------


def test_sweeps_page_lists_every_sweep_with_a_link_into_it(open_page: Open, filled: Filled) -> None:
    at = open_page("sweeps")
    assert at.title[0].value == "Sweeps"
    table = at.dataframe[0].value
    assert sorted(table["sweep"]) == sorted(NAMES)
    row = table.set_index("sweep").loc[TPE]
    best = summarize(stored(filled), TPE).best()
    assert best is not None and best.values
    assert row["state"] == "done" and row["progress"] == "10 / 10"
    assert row["objective"] == "loss (min)" and row["scheduler"] == "tpe"
    assert float(row["best"]) == pytest.approx(best.values[0], rel=1e-2)
    assert table.set_index("sweep").loc[MULTI, "best"].endswith("on the front")
    assert metrics(at)["sweeps"] == str(len(NAMES))
    links = {e.proto.label: e.proto.query_string for e in at.get("page_link")}
    assert any(label.startswith(f"{PBT} — done") for label in links)
    assert "sweep=multi" in {q for q in links.values()}


# -- Sweep -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sweep", [TPE, FAILING, PBT])
def test_trials_table_marks_the_sweeps_best(open_page: Open, filled: Filled, sweep: str) -> None:
    at = open_page("sweep", sweep)
    summary = summarize(stored(filled), sweep)
    table = at.dataframe[0].value
    assert list(table["trial"]) == [t.number for t in summary.trials]
    best = summary.best()
    assert best is not None and best.values
    marked = table[table["best"] == "★"]
    assert list(marked["trial"]) == [best.number]
    assert marked["metric.loss"].iloc[0] == pytest.approx(best.values[0])
    assert metrics(at)["best loss"] == f"{best.values[0]:.4g}"
    assert {"param.lr", "param.width", "duration s", "host / devices", "mlflow"} <= set(table)
    assert ("error" in table) == (sweep == FAILING), "an error column only where one failed"
    if sweep == PBT:  # members change hyperparameters as they train: no importance of them
        assert POPULATION_REASON in [i.value for i in at.info]
        assert not {"importance", "parallel", "slice"} & set(figures(at))


def test_trials_table_shows_pruned_steps_errors_and_mlflow_links(
    open_page: Open, filled: Filled
) -> None:
    st = stored(filled)
    pruned = open_page("sweep", TPE).dataframe[0].value.set_index("trial")
    for t in summarize(st, TPE).trials:
        assert pruned.loc[t.number, "pruned at"] == (
            str(t.last_step) if t.state == "PRUNED" else ""
        )
    assert (pruned["state"] == "PRUNED").any(), "the median pruner pruned nothing"
    failing = open_page("sweep", FAILING).dataframe[0].value.set_index("trial")
    fails = failing[failing["state"] == "FAIL"]
    assert len(fails) == 2
    assert all(e.startswith("RuntimeError: diverged: loss is nan") for e in fails["error"])
    sweep = st.sweeps.get(FAILING)
    record = st.trials.get(FAILING, 1)
    assert sweep is not None and record is not None
    assert failing.loc[1, "mlflow"] == (
        f"http://127.0.0.1:5000/#/experiments/{sweep.mlflow_experiment_id}"
        f"/runs/{record.mlflow_run_id}?workflowType=machine_learning"
    )
    assert failing.loc[1, "host / devices"].endswith(": cpu:0")


def test_filter_by_state_and_param_range(open_page: Open, filled: Filled) -> None:
    at = open_page("sweep", FAILING)
    at.multiselect(key=f"states-{FAILING}").set_value(["FAIL"]).run()
    assert set(at.dataframe[0].value["state"]) == {"FAIL"}
    at.multiselect(key=f"states-{FAILING}").set_value(["COMPLETE", "FAIL"]).run()
    width = at.slider(key=f"range-{FAILING}-width")  # log10 of width: a log-scaled param
    lo, hi = width.value
    width.set_value((lo, (lo + hi) / 2)).run()
    shown = at.dataframe[0].value
    assert all(w <= 10 ** ((lo + hi) / 2) for w in shown["param.width"])
    assert set(shown["state"]) <= {"COMPLETE", "FAIL"} and len(shown) < 6


def test_a_trials_details_show_its_system_metrics_from_mlflow(
    open_page: Open, filled: Filled
) -> None:
    record = stored(filled).trials.get(TPE, 1)
    assert record is not None
    client = MlflowClient(filled.tracking[TPE])
    keys = [k for k in client.get_run(str(record.mlflow_run_id)).data.metrics if "system/" in k]
    assert "system/cpu_utilization_percentage" in keys, keys
    at = open_page("sweep", TPE)
    at.selectbox(key=f"detail-{TPE}").set_value(1).run()
    (table,) = [t.value for t in at.table if t.value.index.name == "metric"]
    assert sorted(table.index) == sorted(k.removeprefix("system/") for k in keys)
    for key in keys:
        samples = len(client.get_metric_history(str(record.mlflow_run_id), key))
        assert table.loc[key.removeprefix("system/"), "samples"] == samples, key


def test_selected_failed_trial_shows_its_error_and_log_tail(open_page: Open) -> None:
    at = open_page("sweep", FAILING)
    at.selectbox(key=f"detail-{FAILING}").set_value(0).run()  # failed before its first report
    codes = [c.value for c in at.code]
    assert any("Traceback" in c and "RuntimeError: diverged" in c for c in codes)  # error, log
    assert len(codes) == 2
    shown = [m.value for m in (*at.markdown, *at.caption)]
    assert "**last report** none (it reported nothing)" in shown
    assert not [text for text in shown if "None" in text]


def test_sweep_page_draws_progress_curves_and_analysis(open_page: Open, filled: Filled) -> None:
    at = open_page("sweep", TPE)
    figs = figures(at)
    drawn = {"history", "best-time", "curves", "importance", "parallel", "slice", "contour"}
    assert drawn | {"edf", "rank"} <= set(figs)
    assert figs["edf"]["layout"]["title"]["text"] == "Empirical distribution of loss"
    assert figs["rank"]["layout"]["title"]["text"] == "Rank of loss over lr and width"
    summary = summarize(stored(filled), TPE)
    complete = {t.number: t for t in summary.trials if t.state == COMPLETE and t.values}
    (line,) = figs["edf"]["data"]  # the share of completed trials at or below each x
    values = sorted(t.values[0] for t in complete.values())
    xs, ys = array(line["x"]), array(line["y"])
    assert (min(xs), max(xs)) == pytest.approx((values[0], values[-1]))
    assert ys == pytest.approx(
        [sum(v <= x * (1 + 1e-12) for v in values) / len(values) for x in xs]
    )
    points = next(d for d in figs["rank"]["data"] if d.get("mode") == "markers")
    for axis, param in (("x", "lr"), ("y", "width")):
        searched = sorted(t.params[param] for t in complete.values())
        assert sorted(array(points[axis])) == pytest.approx(searched), param
    best = summary.best()
    assert best is not None and best.values
    best_line = next(d for d in figs["best-time"]["data"] if d["name"] == "best so far")
    assert best_line["y"][-1] == pytest.approx(best.values[0])
    assert any("matters most for loss" in m.value for m in at.markdown)


CHAR_PX, PLOT_PX = 7, 700  # a tick label's character; a narrow page's chart


def test_log_axis_tick_labels_fit_their_axis(open_page: Open) -> None:
    figs = figures(open_page("sweep", TPE))
    for key in ("slice", "contour", "rank"):
        layout = figs[key]["layout"]
        axes = {n: a for n, a in layout.items() if n[1:5] == "axis" and a.get("type") == "log"}
        assert len(axes) >= 2, key  # lr and width are searched on a log scale
        for name, axis in axes.items():
            low, high = axis.get("domain", [0.0, 1.0])
            labels = axis["ticktext"]
            assert 2 <= len(labels) <= 8, (key, name, labels)
            if name.startswith("x"):  # side by side: their widths add up
                assert sum(len(t) + 2 for t in labels) * CHAR_PX <= (high - low) * PLOT_PX


def trial_colours(traces: list[dict[str, Any]]) -> dict[str, str]:
    """Each trace's colour (its line's, else its markers') by the trace's name."""
    return {d["name"]: (d.get("line") or {}).get("color") or d["marker"]["color"] for d in traces}


def test_learning_curves_mark_where_a_trial_was_pruned(open_page: Open, filled: Filled) -> None:
    at = open_page("sweep", TPE)
    pruned = [t for t in summarize(stored(filled), TPE).trials if t.state == "PRUNED"]
    at.multiselect(key=f"sweep-trials-{TPE}").set_value([pruned[0].number]).run()
    data = figures(at)["curves"]["data"]
    marker = next(d for d in data if d["name"].endswith("pruned"))
    assert marker["x"] == [pruned[0].last_step] and marker["marker"]["symbol"] == "x"
    at.selectbox(key=f"sweep-axis-{TPE}").set_value("elapsed").run()
    line = figures(at)["curves"]["data"][0]
    assert line["x"][0] == 0 and line["x"][-1] > 0
    at.selectbox(key=f"sweep-metric-{TPE}").set_value("accuracy").run()
    assert figures(at)["curves"]["layout"]["yaxis"]["title"]["text"] == "accuracy"


def test_a_trial_has_one_colour_on_every_page(open_page: Open, filled: Filled) -> None:
    pruned = [t.number for t in summarize(stored(filled), TPE).trials if t.state == PRUNED]
    at = open_page("sweep", TPE)
    at.multiselect(key=f"sweep-trials-{TPE}").set_value([0, 1, *pruned[:2]]).run()
    on_sweep = trial_colours(figures(at)["curves"]["data"])
    at = open_page("compare", TPE)
    at.multiselect(key=f"compare-trials-{TPE}").set_value([1, *pruned[:2]]).run()
    on_compare = trial_colours(figures(at)["compare-curves"]["data"])
    on_population = trial_colours(figures(open_page("population", PBT))["member-curves"]["data"])
    shown = 0
    for colours in (on_sweep, on_compare, on_population):
        for name, colour in colours.items():  # "trial 3", "trial 3 ★", "member 2 pruned"
            assert colour == trial_colour(int(name.split()[1])), name
            shown += 1
    assert {n.removesuffix(" ★") for n in on_sweep} >= {f"trial {n} pruned" for n in pruned[:2]}
    assert shown >= 10


def test_pareto_points_equal_sweep_status_front(open_page: Open, filled: Filled) -> None:
    status = cli("sweep", "status", MULTI, "--storage", filled.storage, "--json")
    assert status.returncode == 0, status.stderr
    front = {(t["number"], tuple(t["values"])) for t in json.loads(status.stdout)["pareto_front"]}
    at = open_page("sweep", MULTI)
    trace = next(d for d in figures(at)["pareto"]["data"] if d["name"] == "Pareto front")
    assert sorted(zip(trace["x"], trace["y"], strict=True)) == sorted(v for _, v in front)
    table = at.dataframe[0].value
    assert set(table[table["front"] == "★"]["trial"]) == {n for n, _ in front}
    assert metrics(at)["on the Pareto front"] == str(len(front))


def test_multi_objective_sweep_says_single_objective_charts_do_not_apply(open_page: Open) -> None:
    at = open_page("sweep", MULTI)
    assert any("multi-objective sweep has no single best value" in i.value for i in at.info)
    figs = figures(at)
    assert "history" not in figs and "best-time" not in figs
    at.selectbox(key=f"objective-{MULTI}").set_value(1).run()
    assert "cost" in figures(at)["importance"]["layout"]["title"]["text"]


# -- Compare -----------------------------------------------------------------------------------


def test_compare_shows_only_differing_params_and_shared_curves(
    open_page: Open, filled: Filled
) -> None:
    at = open_page("compare", TPE)
    at.multiselect(key=f"compare-trials-{TPE}").set_value([1, 2]).run()
    tables = at.table
    assert [t.value.columns.tolist() for t in tables] == [["trial 1", "trial 2"]] * 2
    diff = tables[1].value
    params = {n: summarize(stored(filled), TPE).trials[n].params for n in (1, 2)}
    differing = {k for k in params[1] if params[1][k] != params[2][k]}
    assert set(diff.index) == differing
    curves = figures(at)["compare-curves"]["data"]
    assert [d["name"] for d in curves if not d["name"].endswith("pruned")] == ["trial 1", "trial 2"]


def test_compare_highlights_only_what_differs_in_each_trials_colour(
    open_page: Open, filled: Filled
) -> None:
    trials = summarize(stored(filled), TPE).trials
    pair = [next(t.number for t in trials if t.state == s) for s in (COMPLETE, PRUNED)]
    at = open_page("compare", TPE)
    at.multiselect(key=f"compare-trials-{TPE}").set_value(pair).run()
    outcome = at.table[0]
    marked = re.findall(r"_row(\d+)_col1\b", outcome.proto.arrow_data.styler.styles)
    rows = outcome.value.index.tolist()
    assert {rows[int(r)] for r in marked} == {"state", "steps"}, "a metric differs always"
    for trace in figures(at)["compare-curves"]["data"]:  # the line and the pruned mark
        number = int(trace["name"].split()[1])
        colour = (trace.get("line") or {}).get("color") or trace["marker"]["color"]
        assert colour == trial_colour(number), trace["name"]


def test_compare_asks_for_two_trials(open_page: Open) -> None:
    at = open_page("compare", TPE)
    at.multiselect(key=f"compare-trials-{TPE}").set_value([1]).run()
    assert any("Pick 2 to 8 trials" in i.value for i in at.info)


# -- Population --------------------------------------------------------------------------------


def test_family_tree_edges_equal_the_stored_lineage(open_page: Open, filled: Filled) -> None:
    st = stored(filled)
    exploits = [e for e in SqlPopulationStore(st.engine).lineage(PBT) if e.kind == "exploit"]
    assert exploits, "the PBT sweep made no exploit"
    at = open_page("population", PBT)
    edges = next(d for d in figures(at)["tree"]["data"] if d["name"].startswith("exploit"))
    drawn = [tuple(c) for c in edges["customdata"][::3]]
    assert drawn == [(e.donor, e.donor_step, e.member, e.step) for e in exploits]
    xs, ys = edges["x"], edges["y"]
    assert [(xs[i], ys[i], xs[i + 1], ys[i + 1]) for i in range(0, len(xs), 3)] == [
        (e.donor_step, e.donor, e.donor_step, e.member) for e in exploits
    ]
    table = at.dataframe[0].value
    assert list(zip(table["member"], table["donor"], table["donor step"], strict=True)) == [
        (e.member, e.donor, e.donor_step) for e in exploits
    ]
    assert metrics(at)["exploits"] == str(len(exploits))
    markers = next(d for d in figures(at)["tree"]["data"] if d["name"].startswith("hyperparam"))
    lanes: dict[int, list[tuple[float, str]]] = {}
    for x, y, text in zip(markers["x"], markers["y"], markers["text"], strict=True):
        lanes.setdefault(y, []).extend([(x, text)] if text else [])
    first = min(markers["x"])
    last = max(x for x in figures(at)["tree"]["data"][0]["x"] if x is not None)
    assert all(lanes.values()), "a lane without any parameter label"
    for labels in lanes.values():  # each label ends before the next one on its lane starts
        for (x, text), (next_x, _) in itertools.pairwise(sorted(labels)):
            assert next_x - x >= tree.label_steps(text, first, last), (x, text, next_x)


def test_population_shows_the_winners_full_schedule(open_page: Open, filled: Filled) -> None:
    st = stored(filled)
    best = summarize(st, PBT).best()
    assert best is not None
    at = open_page("population", PBT)
    assert metrics(at)["winner"] == f"member {best.number}"
    # as `hyperfleet sweep replay` reads it: the population store (which takes its lock)
    schedule = replay_schedule(
        SqlPopulationStore(Storage(filled.storage, create=False).engine), PBT, best.number
    )
    shown = at.table[0].value
    assert list(shown["from step"]) == [s for s, _ in schedule]
    assert "member-curves" in figures(at)


def test_population_page_on_a_sweep_without_a_population(open_page: Open) -> None:
    at = open_page("population", TPE)
    assert "not population-based training" in at.info[0].value


# -- Devices -----------------------------------------------------------------------------------


def test_device_timeline_has_a_bar_per_leased_device(open_page: Open, filled: Filled) -> None:
    leases = stored(filled).leases.all(PBT)
    at = open_page("devices", PBT)
    bars = [d for d in figures(at)["timeline"]["data"] if d["name"] != "paused"]
    assert sum(len(d["y"]) for d in bars) == sum(len(lease.devices) for lease in leases)
    paused = [d for d in figures(at)["timeline"]["data"] if d["name"] == "paused"]
    assert paused and all(y.startswith("paused · trial") for y in paused[0]["y"])
    shown = metrics(at)  # leased time as such; the load from the trials' system metrics
    assert shown["leased time"].endswith("%") and shown["device load"].endswith("%"), shown
    lanes = at.table[0].value
    assert set(lanes.index) == {f"{lease.host} · {d}" for lease in leases for d in lease.devices}
    assert all(cell.endswith("%") for cell in lanes["busy"])
    workers = at.table[1].value  # the one worker `sweep run` started served every lease
    assert list(workers.index) == list({lease.worker for lease in leases})
    assert list(workers["leases of this sweep"]) == [len(leases)]


# -- errors --------------------------------------------------------------------------------------


def test_a_misspelled_sweep_in_the_url_gets_the_closest_name(
    filled: Filled, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPERFLEET_STORAGE", filled.storage)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["sweep"] = "tpe-prund"
    at.run()
    assert not at.exception, at.exception
    warned = [w.value for w in at.sidebar.warning]
    assert any(
        "no sweep named 'tpe-prund'" in w and "did you mean 'tpe-pruned'?" in w for w in warned
    )


def test_a_click_on_a_sweeps_row_opens_the_sweep(open_page: Open) -> None:
    at = open_page("sweeps")
    shown = at.dataframe[0].value
    row = list(shown["sweep"]).index(MULTI)
    at.session_state[SWEEPS_TABLE] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    assert not at.exception, at.exception
    assert at.query_params["sweep"] in (MULTI, [MULTI])
    assert at.title[0].value.endswith(MULTI), [t.value for t in at.title]


def test_unreadable_mlflow_store_is_a_warning_not_an_error(
    open_page: Open, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPERFLEET_TRACKING_URI", f"sqlite:///{tmp_path / 'none.db'}")
    at = open_page("sweep", TPE)
    assert any("cannot be read" in w.value and "no MLflow database" in w.value for w in at.warning)
    assert "curves" not in figures(at) and "importance" in figures(at)
    assert list(tmp_path.iterdir()) == []


# -- charts that stay readable -------------------------------------------------------------------

VALUE_AXES = {  # the Sweep page's charts of values, and where their values are
    "history": "y", "best-time": "y", "curves": "y", "slice": "y", "edf": "x",
    "contour": "colour", "parallel": "dimension",
}  # fmt: skip


def is_log(fig: dict[str, Any], where: str) -> bool:
    layout, data = fig["layout"], fig["data"]
    if where in ("x", "y"):
        axes = [a for n, a in layout.items() if n.startswith(f"{where}axis")]
        return bool(axes) and all(a.get("type") == "log" for a in axes)
    if where == "colour":  # the surface's values as log10, the colour bar in real values
        surface = [d for d in data if d["type"] in ("contour", "heatmap")]
        return bool(surface) and all("log" in d["colorbar"]["title"]["text"] for d in surface)
    return str(layout["xaxis"]["ticktext"][0]).endswith("(log)")  # parallel: objective first


def captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def test_every_value_axis_turns_log_when_the_values_span_decades(open_page: Open) -> None:
    at = open_page("sweep", DIVERGED)  # two trials diverged to 1e13
    figs = figures(at)
    for key, where in VALUE_AXES.items():
        assert is_log(figs[key], where), key
    automatic = [c for c in captions(at) if "log scale" in c and "automatically" in c]
    assert len(automatic) == len(VALUE_AXES), captions(at)
    calm = figures(open_page("sweep", FAILING))  # within a decade: linear as before
    assert not [k for k, where in VALUE_AXES.items() if k in calm and is_log(calm[k], where)]


def test_the_log_scale_switch_overrides_the_automatic_choice(open_page: Open) -> None:
    at = open_page("sweep", DIVERGED)
    at.radio(key=f"scale-history-{DIVERGED}").set_value("linear").run()
    figs = figures(at)
    assert not is_log(figs["history"], "y") and is_log(figs["best-time"], "y")
    at = open_page("sweep", TPE)
    at.radio(key=f"scale-curves-{TPE}").set_value("log").run()
    assert is_log(figures(at)["curves"], "y")
    at = open_page("compare", TPE)
    at.radio(key=f"scale-compare-curves-{TPE}").set_value("log").run()
    assert is_log(figures(at)["compare-curves"], "y")
    at = open_page("population", PBT)
    at.radio(key=f"scale-member-curves-{PBT}").set_value("log").run()
    assert is_log(figures(at)["member-curves"], "y")
    at = open_page("sweep", MULTI)
    at.radio(key=f"scale-pareto-{MULTI}").set_value("log").run()
    assert is_log(figures(at)["pareto"], "x") and is_log(figures(at)["pareto"], "y")


def test_a_categorical_parameter_gets_a_heatmap_cell_per_category(open_page: Open) -> None:
    at = open_page("sweep", DIVERGED)
    assert at.selectbox(key=f"pair-b-{DIVERGED}").value == "opt"  # lr against opt
    fig = figures(at)["contour"]
    assert not [d for d in fig["data"] if d["type"] == "contour"]
    (heat,) = [d for d in fig["data"] if d["type"] == "heatmap"]
    assert list(heat["y"]) == ["sgd", "adam"]


def test_pruned_trials_and_their_marks_are_drawn_by_default(
    open_page: Open, filled: Filled
) -> None:
    pruned = [t for t in summarize(stored(filled), TPE).trials if t.state == PRUNED]
    assert pruned, "the median pruner pruned nothing"
    data = figures(open_page("sweep", TPE))["curves"]["data"]  # no trial picked by hand
    names = {d["name"] for d in data}
    for t in pruned:
        assert f"trial {t.number} (pruned)" in names, names
        mark = next(d for d in data if d["name"] == f"trial {t.number} pruned")
        assert mark["x"] == [t.last_step] and mark["marker"]["symbol"] == "x"


def test_metric_columns_never_collide_with_params_or_the_tables_own(
    open_page: Open, filled: Filled
) -> None:
    at = open_page("sweep", DIVERGED)  # objective "state"; a metric and a param "lr"
    table = at.dataframe[0].value
    summary = summarize(stored(filled), DIVERGED)
    assert list(table["state"]) == [t.state for t in summary.trials]
    assert list(table["metric.state"]) == pytest.approx([t.values[0] for t in summary.trials])
    assert list(table["param.lr"]) == pytest.approx([t.params["lr"] for t in summary.trials])
    reported = [t.metrics["lr"] for t in summary.trials]
    assert list(table["metric.lr"]) == pytest.approx(reported)
    assert list(table["param.lr"]) != list(table["metric.lr"])
    at = open_page("compare", DIVERGED)
    assert {"state", "metric.state", "metric.lr"} <= set(at.table[0].value.index)


@pytest.mark.parametrize("view", ["sweeps", "sweep", "compare", "population", "devices"])
def test_no_stray_text_on_any_page(open_page: Open, view: str) -> None:
    """The page's title comes first; no text reads ``None``; nothing is printed by magic."""
    for sweep in NAMES:
        at = open_page(view, sweep)
        first = next(iter(at.main))
        while first.type in ("vertical", "block") or not hasattr(first, "value"):
            first = next(iter(first.children.values()))  # the live fragment's block
        assert first.type == "title", (view, sweep, first)
        texts = [e.value for e in (*at.markdown, *at.caption, *at.text, *at.info)]
        assert not [t for t in texts if t.strip() in ("None", "", "null")], (view, sweep, texts)
