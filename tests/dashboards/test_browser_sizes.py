"""An elastic trial's sizes in a real browser: ``hyperfleet dashboard`` on the small storage of
:mod:`tests.dashboards.elastic` (a resized trial written as a worker writes it, no sweep run),
driven by headless Chromium as :mod:`tests.dashboards.test_browser` drives the other pages (its
browser, screenshots and page helpers)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.elastic import ELASTIC, resized_storage
from tests.dashboards.server import start as start_dashboard
from tests.dashboards.test_browser import Page, browser, figure, shots  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.long]
HOVERS_JS = """
const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .find(gd => String((gd.layout && gd.layout.title && gd.layout.title.text) || '')
        .includes('Device timeline'));
return gd ? JSON.stringify(gd.data.map(d => d.customdata || [])) : '';
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = resized_storage(tmp_path_factory.mktemp("resized"))
    cwd = tmp_path_factory.mktemp("dashboard-cwd")
    dashboard = start_dashboard(["--storage", url], cwd, cwd.parent / "dashboard-sizes.log")
    try:
        yield dashboard.url
    finally:
        dashboard.stop()


@pytest.fixture(scope="module")
def page(browser: Any, shots: Path) -> Page:  # noqa: F811
    return Page(browser, shots)


def test_the_device_timeline_marks_the_resizes(page: Page, server: str) -> None:
    page.driver.get(f"{server}/devices?sweep={ELASTIC}")
    page.title_is(f"Devices of {ELASTIC}")
    page.charts(1)
    path = page.shot("sizes-devices")
    names = figure(page, "Device timeline")["names"]
    assert "resize: grew" in names and "resize: shrank" in names, path
    assert "3 resizes of 1 elastic trial" in page.text, path
    hovers = json.loads(page.driver.execute_script(HOVERS_JS) or "[]")
    said = json.dumps(hovers, ensure_ascii=False)
    for size in ("1 device", "4 devices (resized from 2)", "2 devices (resized from 4)"):
        assert size in said, (size, path)


def test_the_trial_details_say_its_sizes(page: Page, server: str) -> None:
    page.driver.get(f"{server}/sweep?sweep={ELASTIC}")
    page.title_is(f"Sweep {ELASTIC}")
    sizes = "size 1 → 2 → 4 → 2 ranks, from steps 1, 40, 70, 100"
    page.wait(lambda: sizes in page.text, "the trial's sizes")
    path = page.shot("sizes-sweep")
    assert "trial 0 · COMPLETE" in page.text, path
