"""An elastic trial's sizes on the dashboard, read from a real SQLite storage written as a
worker writes a resized trial (:mod:`tests.dashboards.elastic`): its launches from its leases,
the Devices timeline's hover and resize markers, the sizes in a trial's details, and both
pages run by ``AppTest``."""

from __future__ import annotations

import datetime as dt

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.dashboards import queries, sizes, timeline
from hyperfleet.platform.storage import LeaseRecord, Storage
from tests.dashboards.elastic import ELASTIC, FIXED, PATH, launch_start, resized_storage
from tests.dashboards.sweeps import APP
from tests.dashboards.test_pages import figures


@pytest.fixture(scope="module")
def resized(tmp_path_factory: pytest.TempPathFactory) -> str:
    return resized_storage(tmp_path_factory.mktemp("resized"))


def _data(url: str, name: str = ELASTIC) -> queries.SweepData:
    storage = Storage.open_readonly(url)
    try:
        return queries.sweep_data(storage, name)
    finally:
        storage.close()


def test_a_resized_trial_has_a_launch_per_size(resized: str) -> None:
    found = sizes.launches(_data(resized).leases)
    assert [(x.trial, x.devices, x.before) for x in found] == [
        (0, 1, None), (0, 2, 1), (0, 4, 2), (0, 2, 4), (1, 1, None),
    ]  # fmt: skip
    assert [x.start for x in found if x.trial == 0] == [launch_start(i) for i in range(4)]
    assert [(x.before, x.devices) for x in sizes.resizes(_data(resized).leases)] == [
        (1, 2), (2, 4), (4, 2),
    ]  # fmt: skip


def test_a_gangs_leases_are_one_launch_and_a_relaunch_at_its_size_is_no_resize() -> None:
    def lease(i: int, host: str, start: float, end: float) -> LeaseRecord:
        return LeaseRecord(i, "s", 0, host, 7, ["cuda:0", "cuda:1"], start, end, "FAIL")

    leases = [lease(1, "a", 0.0, 10.0), lease(2, "b", 0.5, 10.0), lease(3, "a", 12.0, 20.0),
              lease(4, "b", 12.2, 20.0)]  # fmt: skip
    found = sizes.launches(leases)
    assert [(x.leases, x.devices, x.resized) for x in found] == [
        ((1, 2), 4, False), ((3, 4), 4, False),
    ]  # fmt: skip
    shrunk = [*leases[:2], lease(3, "a", 12.0, 20.0)]  # a node lost: relaunched on one host
    assert [x.devices for x in sizes.resizes(shrunk)] == [2]


def test_each_bar_says_its_launchs_size(resized: str) -> None:
    bars = timeline.bars(_data(resized).leases, now=0.0)
    said = {(b.trial, b.start, b.size) for b in bars}
    assert said == {
        (0, launch_start(0), "1 device"),
        (0, launch_start(1), "2 devices (resized from 1)"),
        (0, launch_start(2), "4 devices (resized from 2)"),
        (0, launch_start(3), "2 devices (resized from 4)"),
        (1, launch_start(0), "1 device"),
    }
    assert len(bars) == sum(len(devices) for _, devices in PATH) + 1


def test_the_timeline_marks_each_resize_on_the_new_launchs_lanes(resized: str) -> None:
    data = _data(resized)
    bars = timeline.bars(data.leases, now=0.0)
    fig = timeline.figure(bars, [])
    marks = {t.name: t for t in fig.data if t.name.startswith("resize")}
    assert sorted(marks) == ["resize: grew", "resize: shrank"]
    grew, shrank = marks["resize: grew"], marks["resize: shrank"]
    at = dt.datetime.fromtimestamp
    lanes = [f"{data.leases[0].host} · cpu:{i}" for i in range(4)]
    assert list(zip(grew.x, grew.y, strict=True)) == [
        *((at(launch_start(1)), lane) for lane in lanes[:2]),
        *((at(launch_start(2)), lane) for lane in lanes),
    ]
    assert list(zip(shrank.x, shrank.y, strict=True)) == [
        (at(launch_start(3)), lane) for lane in lanes[:2]
    ]
    assert shrank.text[0] == "trial 0 shrank: 4 → 2 devices"
    hovers = [t.hovertemplate for t in fig.data if not t.name.startswith("resize")]
    assert hovers and all("size=" in h for h in hovers), hovers


def test_a_fixed_sweeps_timeline_has_no_resize_marker(resized: str) -> None:
    fig = timeline.figure(timeline.bars(_data(resized, FIXED).leases, now=0.0), [])
    assert [t.name for t in fig.data] == ["COMPLETE"]


def test_the_details_say_an_elastic_trials_sizes(resized: str) -> None:
    data, fixed = _data(resized), _data(resized, FIXED)
    assert sizes.sizes_text(data.records[0], data.config) == (
        "1 → 2 → 4 → 2 ranks, from steps 1, 40, 70, 100"
    )
    assert sizes.sizes_text(data.records[1], data.config) == "1 rank (not resized)"
    assert fixed.records[0].sizes == [[1, 1]]
    assert sizes.sizes_text(fixed.records[0], fixed.config) is None


def _page(url: str, view: str, sweep: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    monkeypatch.delenv("HYPERFLEET_TRACKING_URI", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["sweep"] = sweep
    at.switch_page(f"views/{view}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_pages_show_the_sizes(resized: str, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _page(resized, "sweep", ELASTIC, monkeypatch)  # trial 0, the best, is detailed
    said = [m.value for m in at.markdown]
    assert "**size** 1 → 2 → 4 → 2 ranks, from steps 1, 40, 70, 100" in said, said
    at = _page(resized, "devices", ELASTIC, monkeypatch)
    names = [d["name"] for d in figures(at)["timeline"]["data"]]
    assert "resize: grew" in names and "resize: shrank" in names, names
    captions = [c.value for c in at.caption]
    line = (
        "3 resizes of 1 elastic trial, marked where each was relaunched at its new size "
        "(▲ grew, ▼ shrank; a resized launch's lease ends PAUSED): trial 0 1 → 2 → 4 → 2 devices"
    )
    assert line in captions, captions
    at = _page(resized, "sweep", FIXED, monkeypatch)
    assert not [m.value for m in at.markdown if m.value.startswith("**size**")]
    at = _page(resized, "devices", FIXED, monkeypatch)
    assert not [c.value for c in at.caption if " elastic trial" in c.value]
