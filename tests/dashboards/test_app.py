"""The Streamlit dashboard renders a stored sweep (Streamlit's own script runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.storage import Storage

APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"


def test_dashboard_shows_trials_of_a_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    st = Storage(url)
    st.create_sweep("demo", {"objective": {"metric": "acc", "mode": "max"}, "space": {"lr": {}}})
    st.upsert_trial("demo", 0, state="COMPLETE", params={"lr": 0.1}, metrics={"acc": 0.9})
    st.upsert_trial("demo", 1, state="FAIL", params={"lr": 0.5}, error="boom")
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not app.exception
    assert app.title[0].value == "hyperfleet"
    assert {m.label: m.value for m in app.metric} == {"COMPLETE": "1", "PRUNED": "0", "FAIL": "1"}
    frame = app.dataframe[0].value
    assert list(frame["trial"]) == [0, 1] and frame["acc"].iloc[0] == pytest.approx(0.9)


def test_dashboard_on_empty_storage_says_how_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPERFLEET_STORAGE", f"sqlite:///{tmp_path / 'empty.db'}")
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not app.exception
    assert "No sweeps" in app.info[0].value
