"""The dashboard open on a SQLite sweep that is writing: neither side sees "database is
locked", the pages show the sweep while it runs (and say they refresh), and then its end.

A real ``hyperfleet sweep run`` subprocess writes a report per step of each trial (platform
tables, Optuna, MLflow) while the test runs the dashboard's pages against the same database
file, one after the other, for as long as the sweep runs. The dashboard's reads are what
AppTest runs: the same page code and queries a browser session runs. The trials hold mid-run
(``tests.integration.workloads``' hold params) until a page has shown one running: in-process
trials of 20 steps can otherwise end before the first page is drawn.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from tests.dashboards.sweeps import APP, write_sweep
from tests.integration.cli import cli_env

pytestmark = pytest.mark.slow
TRIALS = 4


def _sweep_file(root: Path, mlflow_template: Path) -> Path:
    data = minimal_sweep(
        name="live",
        scheduler={"type": "tpe", "seed": 1, "n_startup_trials": 2},
        budget={"trials": TRIALS},
        space={"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        trial={
            "workload": "tests.dashboards.workloads:held_curve",
            "steps": 20,
            "params": {"hold_file": str(root / "release"), "hold_at": 10},
        },
        workdir=str(root),
    )
    return write_sweep(root, mlflow_template, data)


def test_dashboard_reading_a_writing_sqlite_sweep(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _sweep_file(tmp_path, mlflow_template)
    monkeypatch.setenv("HYPERFLEET_STORAGE", f"sqlite:///{tmp_path / 'hf.db'}")
    sweep = subprocess.Popen([sys.executable, "-m", "hyperfleet.platform", "sweep", "run",
                              str(path), "--json"], cwd=tmp_path, env=cli_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen_running, runs = False, 0
    try:
        while sweep.poll() is None:  # read for as long as the sweep writes
            at = AppTest.from_file(str(APP), default_timeout=120).run()
            assert not at.exception, [e.value for e in at.exception]
            if at.error:  # before the sweep created its database: the page says so
                assert "no database" in at.error[0].value or "no hyperfleet" in at.error[0].value
                continue
            for view in ("sweep", "devices", "compare"):
                at.switch_page(f"views/{view}.py").run()
                assert not at.exception, [e.value for e in at.exception]
            at.switch_page("views/sweep.py").run()
            counts = {m.label: m.value for m in at.metric}
            if counts.get("RUNNING", "0") != "0":
                seen_running = True
                assert any("refreshes every" in c.value for c in at.caption)
                (tmp_path / "release").touch()  # the trials held mid-run until now
            runs += 1
        out, err = sweep.communicate(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, err[-3000:]
    assert "locked" not in err, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["state_counts"]["COMPLETE"] == TRIALS
    trials = Storage.open_readonly(f"sqlite:///{tmp_path / 'hf.db'}").trials.of("live")
    assert [t.error for t in trials] == [None] * TRIALS
    assert seen_running and runs > 0
    st.cache_data.clear()  # the pages' reads are cached for 2 s: look afresh at the end
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("views/sweep.py").run()
    assert {m.label: m.value for m in at.metric}["COMPLETE"] == str(TRIALS)
