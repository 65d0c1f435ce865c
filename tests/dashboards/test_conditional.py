"""The dashboard on a conditional sweep (``examples/conditional.yaml``): trials of one optimizer
lack the other's params, and the trials table, its filters, the analysis (importance,
parallel coordinates, slices) and every other page take that in their stride."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import summarize

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "hyperfleet" / "dashboards" / "app.py"
NAME = "conditional"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> SweepConfig:
    """Eight random trials of the example's space, in-process, into their own stores."""
    from hyperfleet.platform.sweeps.run import SweepRunner

    root = tmp_path_factory.mktemp("dashboard-conditional")
    shutil.copy(mlflow_template, root / "mlflow.db")
    data = yaml.safe_load((ROOT / "examples" / "conditional.yaml").read_text())
    data.update(
        scheduler={"type": "random", "seed": 0},
        budget={"trials": 8, "max_concurrent": 2},
        storage=f"sqlite:///{root / 'hf.db'}",
        tracking={"uri": f"sqlite:///{root / 'mlflow.db'}", "log_model": False},
        workdir=str(root),
    )
    data["trial"].update(steps=20, eval_every=5)
    cfg = parse_sweep(data)
    assert cfg.storage is not None and cfg.tracking.uri is not None
    SweepRunner(cfg, cfg.storage, cfg.tracking.uri).run()
    return cfg


def open_page(cfg: SweepConfig, monkeypatch: pytest.MonkeyPatch, view: str) -> AppTest:
    assert cfg.storage is not None
    monkeypatch.setenv("HYPERFLEET_STORAGE", cfg.storage)
    monkeypatch.delenv("HYPERFLEET_TRACKING_URI", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["sweep"] = NAME
    if view != "sweeps":
        at.switch_page(f"views/{view}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figures(at: AppTest) -> dict[str, dict[str, Any]]:
    return {e.proto.id.split("-", 2)[2]: json.loads(e.proto.spec) for e in at.get("plotly_chart")}


def test_trials_table_leaves_a_param_of_another_branch_empty(
    sweep: SweepConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page(sweep, monkeypatch, "sweep")
    table = at.dataframe[0].value
    assert sweep.storage is not None
    trials = {t.number: t for t in summarize(Storage(sweep.storage), NAME).trials}
    assert {"param.optimizer", "param.momentum", "param.beta2"} <= set(table)
    assert {trials[n].params["optimizer"] for n in table["trial"]} == {"sgd", "adamw"}
    for _, row in table.iterrows():
        params = trials[row["trial"]].params
        assert row["param.optimizer"] == params["optimizer"]
        assert pd.isna(row["param.momentum"]) == ("momentum" not in params)
        assert pd.isna(row["param.beta2"]) == ("beta2" not in params)
    assert {"importance", "parallel", "slice"} <= set(figures(at))
    assert any("matters most for loss" in m.value for m in at.markdown)


def test_a_range_filter_on_a_branch_param_keeps_the_trials_without_it(
    sweep: SweepConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page(sweep, monkeypatch, "sweep")
    table = at.dataframe[0].value
    sgd = table[table["param.optimizer"] == "sgd"]
    cut = float(sgd["param.momentum"].median())
    momentum = at.slider(key=f"range-{NAME}-momentum")
    momentum.set_value((momentum.value[0], cut)).run()
    shown = at.dataframe[0].value
    kept_sgd = shown[shown["param.optimizer"] == "sgd"]
    assert 0 < len(kept_sgd) < len(sgd)
    assert all(m <= cut + 1e-9 for m in kept_sgd["param.momentum"])
    adamw = table[table["param.optimizer"] == "adamw"]
    assert list(shown[shown["param.optimizer"] == "adamw"]["trial"]) == list(adamw["trial"])


@pytest.mark.parametrize("view", ["compare", "population", "devices"])
def test_every_other_page_runs_on_a_conditional_sweep(
    sweep: SweepConfig, monkeypatch: pytest.MonkeyPatch, view: str
) -> None:
    at = open_page(sweep, monkeypatch, view)
    assert at.title[0].value.endswith(NAME)
