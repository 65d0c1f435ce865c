"""The dashboard's empty states, run by ``AppTest`` on storages made in the test (no sweep is
run): a mistyped storage (one message, nothing created), a storage without sweeps (the command
to start one, on every page) and a sweep without a finished trial."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from tests.dashboards.sweeps import APP


def test_missing_storage_is_one_message_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPERFLEET_STORAGE", f"sqlite:///{tmp_path / 'typo' / 'hf.db'}")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        f"storage: no database at {tmp_path / 'typo' / 'hf.db'}; check --storage "
        f"(nothing was created)"
    ]
    assert "hyperfleet sweep run" in at.info[0].value
    assert list(tmp_path.iterdir()) == []


def test_empty_storage_says_how_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    Storage(url).close()  # the schema, no sweep
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert at.info[0].value.startswith("No sweeps yet. Start one with `hyperfleet sweep run")
    for view in ("sweep", "compare", "population", "devices"):
        at.switch_page(f"views/{view}.py").run()
        assert not at.exception and "No sweeps yet" in at.info[0].value


@pytest.mark.parametrize("status", ["running", "submitted"])  # submitted: waits for a worker
def test_sweep_without_a_completed_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    st = Storage(url)
    config = parse_sweep(minimal_sweep(name="fresh", storage=url)).model_dump(mode="json")
    st.sweeps.create("fresh", config)
    st.sweeps.update("fresh", status=status)
    if status == "running":
        st.trials.upsert("fresh", 0, state="RUNNING", params={}, started_at=st.now())
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("views/sweep.py").run()
    assert not at.exception
    infos = " ".join(i.value for i in at.info)
    assert "No completed trial yet" in infos and "need 2 completed trials" in infos
    fresh = r"updated \d+ s ago · refreshes every 5 s while the sweep runs"
    assert any(re.fullmatch(fresh, c.value) for c in at.caption), [c.value for c in at.caption]


def test_a_stored_config_this_version_cannot_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep row written by hand or by another version: one line on the page, no traceback."""
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    st = Storage(url)
    st.sweeps.create("odd", {"objective": {"metric": "loss", "mode": "min"}, "space": {}})
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "sweep 'odd': its stored configuration does not parse with this hyperfleet version; "
        "open it with the version that ran it"
    ]
