"""Readers never run stored code: a pickle planted as a sweep's ``trial.code`` and a stored
``module:function`` workload whose module writes a file on import stay unread by every reader
(``sweep status``, ``sweep list``, ``workers``, the dashboard's pages, ``hyperfleet.load``) and
by ``sweep enqueue`` of a stored sweep, and each still shows the sweeps. Stored code runs only
on a worker that serves the sweep."""

from __future__ import annotations

import base64
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

import hyperfleet
from hyperfleet.platform.cli import app
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep

APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"
MODULE = "hf_planted_workload"


class _Planted:
    """Unpickling this runs ``touch <marker>``: what anyone who can write the database could
    store as a sweep's ``trial.code``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _plant(tmp_path: Path) -> tuple[str, Path, Path]:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    pickled_marker, imported_marker = tmp_path / "UNPICKLED", tmp_path / "IMPORTED"
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / f"{MODULE}.py").write_text(
        f"open({str(imported_marker)!r}, 'w').close()\n\ndef main(ctx):\n    return 0.0\n"
    )
    st = Storage(url)
    base = parse_sweep(minimal_sweep(name="x", storage=url)).model_dump(mode="json")
    code = base64.b64encode(pickle.dumps(_Planted(pickled_marker))).decode()
    for name, trial in (
        ("pickled", {"workload": "__main__:main", "code": code}),
        ("imported", {"workload": f"{MODULE}:main", "code": None}),
    ):
        config = {**base, "name": name, "trial": {**base["trial"], **trial}}
        st.sweeps.create(name, config)
        st.sweeps.update(name, status="running")  # status checks a waiting sweep's workers
        st.trials.upsert(
            name,
            0,
            state="COMPLETE",
            params={"x": 0.5},
            metrics={"loss": 0.25},
            last_step=4,
            started_at=st.now(),
            ended_at=st.now(),
        )
        st.trials.upsert(name, 1, state="RUNNING", params={"x": 0.1}, started_at=st.now())
    st.close()
    return url, mods, pickled_marker


@pytest.mark.slow
def test_no_reader_unpickles_or_imports_the_stored_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, mods, _ = _plant(tmp_path)
    monkeypatch.syspath_prepend(str(mods))  # the stored module is importable by the readers
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    markers = [tmp_path / "UNPICKLED", tmp_path / "IMPORTED"]

    def ran() -> list[str]:
        return [m.name for m in markers if m.exists()]

    runner = CliRunner()
    for name in ("pickled", "imported"):
        result = runner.invoke(app, ["sweep", "status", name, "--storage", url])
        assert ran() == [], f"sweep status {name}"
        assert result.exit_code == 0, result.output
        assert "0.25" in result.output
    listed = runner.invoke(app, ["sweep", "list", "--storage", url], terminal_width=200)
    assert listed.exit_code == 0 and "pickled" in listed.output and "imported" in listed.output
    assert ran() == [], "sweep list"
    for name in ("pickled", "imported"):  # queues a point by the sweep's stored space alone
        point = ["sweep", "enqueue", name, "--params", '{"x": 0.7}', "--storage", url]
        queued = runner.invoke(app, point)
        assert ran() == [], f"sweep enqueue {name}"
        assert queued.exit_code == 0 and "queued as trial" in queued.output, queued.output
    workers = runner.invoke(app, ["workers", "--storage", url])
    assert workers.exit_code == 0, workers.output
    assert ran() == [], "workers"

    for name in ("pickled", "imported"):
        result = hyperfleet.load(name, storage=url)
        assert result.name == name and result.best_value == 0.25
        assert ran() == [], f"hyperfleet.load {name}"

    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert ran() == [], "dashboard sweeps"
    assert {"pickled", "imported"} <= set(at.selectbox(key="sweep").options)
    for view in ("sweep", "compare", "population", "devices"):
        at.switch_page(f"views/{view}.py").run()
        for name in ("pickled", "imported"):
            at.selectbox(key="sweep").set_value(name).run()
            assert not at.exception, (view, name, at.exception)
            assert ran() == [], f"dashboard {view} of {name}"
    assert MODULE not in sys.modules
