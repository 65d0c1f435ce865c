"""The dashboard in a real browser: ``hyperfleet dashboard`` as a subprocess, driven through
every page by headless Chromium (Debian's ``chromium`` and ``chromium-driver`` through
Selenium; ``.ci/run`` installs them). One server and one browser serve the whole module.

Each test waits for the page's charts to be drawn (plotly's SVG), asserts on the text a user
reads, and saves a full-page screenshot under the session's ``screenshots`` folder (printed,
and named in every assertion message). Pages are reached as a user reaches them: a click on a
sweep in the Sweeps page, a link with ``?sweep=NAME``, the sidebar's links.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import summarize
from tests.dashboards.server import start as start_dashboard
from tests.dashboards.sweeps import DIVERGED, MULTI, PBT, TPE, WORKLOAD, Filled
from tests.integration.cli import invoke
from tests.tracking.server import MlflowServer

# a real browser (Chromium) on the pages and on MLflow's UI: the pages' logic is tested through
# AppTest in make test
pytestmark = [pytest.mark.slow, pytest.mark.long]
RENDER_TIMEOUT_S = 90
SVG = ".js-plotly-plot .main-svg"
EXPAND_RUN = "runnamecellrenderer"  # MLflow's runs table: the button that shows nested runs
LINKED = {  # two in-process trials, run by `sweep run` against a tracking server
    "name": "linked",
    "objective": {"metric": "loss", "mode": "min"},
    "scheduler": {"type": "random", "seed": 0},
    "budget": {"trials": 2, "max_concurrent": 2},
    "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
    "trial": {"workload": WORKLOAD, "steps": 4, "eval_every": 2, "resources": {"devices": 0}},
    "tracking": {"log_model": False},
}


def _browser_binaries() -> tuple[str, str]:
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found  # type: ignore[return-value]
    if os.environ.get("CI"):
        pytest.fail("Chromium is missing; .ci/run installs Debian's chromium and chromium-driver")
    pytest.skip("Chromium not installed (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def server(filled: Filled, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``hyperfleet dashboard --storage …`` on a free port; yields its URL once it serves."""
    cwd = tmp_path_factory.mktemp("dashboard-cwd")
    dashboard = start_dashboard(["--storage", filled.storage], cwd, cwd.parent / "dashboard.log")
    try:
        yield dashboard.url
    finally:
        dashboard.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = _browser_binaries()
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1600"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


class Page:
    """The browser on one dashboard page: waits, reads text, screenshots."""

    def __init__(self, driver: Any, folder: Path) -> None:
        self.driver = driver
        self.folder = folder

    def wait(self, condition: Any, what: str) -> None:
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        # an element read while Streamlit redraws the page can be gone: look again
        waiting = WebDriverWait(self.driver, RENDER_TIMEOUT_S,
                                ignored_exceptions=(StaleElementReferenceException,))  # fmt: skip
        try:
            waiting.until(lambda d: condition())
        except TimeoutException:
            path = self.shot("timeout")
            raise AssertionError(f"timed out waiting for {what}; see {path}") from None

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def title_is(self, title: str) -> None:
        self.wait(lambda: any(h.text == title for h in self.css("h1")), f"the title {title!r}")

    def charts(self, count: int) -> None:
        """Wait until ``count`` plotly charts are drawn and Streamlit is idle."""
        self.wait(lambda: len(self.css(SVG)) >= count, f"{count} plotly charts")
        self.wait(lambda: not self.css('[data-testid="stStatusWidget"]'), "the script to finish")

    @property
    def text(self) -> str:
        return str(self.css("[data-testid='stMain']")[0].text)

    @property
    def body(self) -> str:
        """The text of the whole page (any page, not only the dashboard's)."""
        return str(self.css("body")[0].text)

    def table_rows(self) -> list[list[str]]:
        """The first table's cells, row by row, as Streamlit's grid gives them to assistive
        technology (its visible cells are drawn on a canvas)."""
        rows = self.css("[data-testid='stDataFrame'] table[role='grid'] tr")
        return [
            [c.get_attribute("textContent") for c in r.find_elements("css selector", "th,td")]
            for r in rows
        ]

    def shot(self, name: str) -> Path:
        """A screenshot of the whole page (the window grown to the page's height)."""
        height = self.driver.execute_script(
            "const m = document.querySelector('[data-testid=\"stMainBlockContainer\"]');"
            "return m ? m.scrollHeight : document.body.scrollHeight;"
        )
        self.driver.set_window_size(1400, max(900, int(height) + 120))
        path = self.folder / f"{name}.png"
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(1400, 1600)
        return path

    def click_link(self, text: str) -> None:
        found: list[Any] = []

        def present() -> bool:
            found[:] = [a for a in self.css("a")
                        if any(line.startswith(text) for line in a.text.splitlines())]  # fmt: skip
            return bool(found)

        self.wait(present, f"a link {text!r}")
        found[0].click()

    def follow(self, start: tuple[str, str], link: str, title: str, charts: int, shot: str) -> Path:
        """Open the page at URL ``start[0]`` (titled ``start[1]``), follow its ``link`` to the
        page titled ``title`` and wait for its ``charts``; the screenshot ``shot``'s path."""
        url, first = start
        self.driver.get(url)
        self.title_is(first)
        self.click_link(link)
        self.title_is(title)
        self.charts(charts)
        return self.shot(shot)


FIGURES_JS = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    title: String((gd.layout && gd.layout.title && gd.layout.title.text) || '')
        .replace(/<[^>]*>/g, ''),  // Streamlit bolds a title: <b>…</b>
    names: (gd.data || []).map(d => d.name || ''),
    yaxis: gd._fullLayout && gd._fullLayout.yaxis ? gd._fullLayout.yaxis.type : null,
}));
"""


def figure(page: Page, title: str) -> dict[str, Any]:
    """The drawn plotly figure whose title starts with ``title``: its title, its traces'
    names and its y axis's type, as plotly holds them in the page."""
    found: list[dict[str, Any]] = []

    def drawn() -> bool:
        shown = page.driver.execute_script(FIGURES_JS)
        found[:] = [f for f in shown if f["title"].startswith(title)]
        return bool(found)

    page.wait(drawn, f"the chart {title!r}")
    return found[0]


def pick_scale(page: Page, key: str, choice: str) -> None:
    """A click on ``choice`` of the scale switch with widget key ``key``."""
    labels: list[Any] = []

    def present() -> bool:
        labels[:] = [e for e in page.css(f".st-key-{key} label") if e.text.strip() == choice]
        return bool(labels)

    page.wait(present, f"the scale switch {key}")
    labels[0].click()


@pytest.fixture(scope="module")
def page(browser: Any, shots: Path) -> Page:
    return Page(browser, shots)


def test_sweeps_page(page: Page, server: str) -> None:
    page.driver.get(f"{server}/sweeps")  # the root's page, by its name too
    page.title_is("Sweeps")
    links = [f"{name} — done" for name in (TPE, MULTI, PBT)]
    page.wait(lambda: all(link in page.text for link in links), "the sweep links")
    page.wait(lambda: "sweeps\n5" in page.text, "the sweep count")
    text = page.text
    path = page.shot("1-sweeps")
    for name in (TPE, MULTI, PBT):
        assert f"{name} — done" in text, path
    assert "sweeps\n5" in text and "running trials\n0" in text, path


ROW_PX = 35  # Streamlit's grid: the header's and each row's height


def test_a_click_on_a_row_of_the_sweeps_table_opens_the_sweep(page: Page, server: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    page.driver.get(f"{server}/sweeps")
    page.title_is("Sweeps")
    page.wait(lambda: len(page.table_rows()) == 6, "the sweeps table's 5 rows")
    row = next(i for i, r in enumerate(page.table_rows()[1:]) if MULTI in r)
    (canvas,) = page.css("[data-testid='stDataFrame'] canvas[data-testid='data-grid-canvas']")
    size = canvas.size  # a click on the row's selection box, the grid's first column
    x, y = 18 - size["width"] // 2, ROW_PX + ROW_PX * row + ROW_PX // 2 - size["height"] // 2
    ActionChains(page.driver).move_to_element_with_offset(canvas, x, y).click().perform()
    page.title_is(f"Sweep {MULTI}")
    assert f"sweep={MULTI}" in page.driver.current_url, page.shot("1-sweeps-row-click")


def test_one_click_into_a_sweep(page: Page, server: str, filled: Filled) -> None:
    page.driver.get(server)
    page.title_is("Sweeps")
    page.click_link(f"{TPE} — done")
    page.title_is(f"Sweep {TPE}")
    page.charts(7)  # history, best over time, curves, importance, parallel, slice, contour
    text = page.text
    path = page.shot("2-sweep")
    best = summarize(Storage.open_readonly(filled.storage), TPE).best()
    assert best is not None and best.values
    rows = page.table_rows()
    assert [r[0] for r in rows[1:] if r[1] == "★"] == [str(best.number)], path
    assert f"best loss\n{best.values[0]:.4g}" in text and "progress\n10 / 10" in text, path
    assert "matters most for loss" in text and "Learning curves" in text, path
    assert "pruned" in page.driver.page_source, path  # the pruned trials' curve markers


def test_pruned_curves_are_drawn_by_default_and_the_log_switch_turns_the_axis(
    page: Page, server: str, filled: Filled
) -> None:
    pruned = [t for t in summarize(Storage.open_readonly(filled.storage), TPE).trials
              if t.state == "PRUNED"]  # fmt: skip
    assert pruned, "the median pruner pruned nothing"
    page.driver.get(f"{server}/sweep?sweep={TPE}")
    page.title_is(f"Sweep {TPE}")
    page.charts(7)
    curves = figure(page, "loss by step")
    path = page.shot("2-sweep-curves")
    for t in pruned:  # drawn without picking them, with the mark where they were pruned
        assert f"trial {t.number} (pruned)" in curves["names"], (curves["names"], path)
        assert f"trial {t.number} pruned" in curves["names"], (curves["names"], path)
    assert curves["yaxis"] == "linear", path  # a few tenths to a few units: no need of log
    pick_scale(page, f"scale-curves-{TPE}", "log")
    page.wait(lambda: figure(page, "loss by step")["yaxis"] == "log", "a log axis")
    page.shot("2-sweep-curves-log")


def test_diverged_values_get_a_log_axis_until_switched_off(page: Page, server: str) -> None:
    page.driver.get(f"{server}/sweep?sweep={DIVERGED}")
    page.title_is(f"Sweep {DIVERGED}")
    page.charts(7)
    path = page.shot("2-sweep-diverged")
    assert figure(page, "Best value over trials")["yaxis"] == "log", path
    assert "log scale, set automatically: state spans" in page.text, path
    pick_scale(page, f"scale-history-{DIVERGED}", "linear")
    page.wait(lambda: figure(page, "Best value over trials")["yaxis"] == "linear", "linear")
    assert figure(page, "Best value over time")["yaxis"] == "log", page.shot("2-diverged-lin")


def test_multi_objective_sweep(page: Page, server: str) -> None:
    page.driver.get(f"{server}/sweep?sweep={MULTI}")
    page.title_is(f"Sweep {MULTI}")
    page.charts(6)  # curves, Pareto front, importance, parallel, slice, contour
    text = page.text
    path = page.shot("3-sweep-multi-objective")
    assert "Pareto front" in text and "on the Pareto front" in text, path
    assert "has no single best value" in text, path


def test_compare(page: Page, server: str) -> None:
    start = (f"{server}/sweep?sweep={TPE}", f"Sweep {TPE}")
    path = page.follow(start, "Compare", f"Compare trials of {TPE}", 1, "4-compare")
    text = page.text
    assert "Parameters that differ" in text and "Outcome" in text, path
    assert "lr" in text and "width" in text, path


def test_population(page: Page, server: str) -> None:
    start = (f"{server}/sweep?sweep={PBT}", f"Sweep {PBT}")
    # the family tree, the members' curves
    path = page.follow(start, "Population", f"Population of {PBT}", 2, "5-population")
    text = page.text
    assert "Family tree" in page.driver.page_source and "full schedule" in text, path
    assert f"hyperfleet sweep replay {PBT} --member" in text, path
    assert "from step" in text, path  # the schedule's steps are shown, not only its params
    assert "exploit (donor → member)" in page.driver.page_source, path


def test_devices(page: Page, server: str) -> None:
    start = (f"{server}/population?sweep={PBT}", f"Population of {PBT}")
    path = page.follow(start, "Devices", f"Devices of {PBT}", 1, "6-devices")
    text = page.text
    assert "Utilisation" in text and "paused stretches" in text, path
    assert "workers\n1" in text and "leases of this sweep" in text, path  # `sweep run`'s worker
    assert "paused · trial" in page.driver.page_source, path  # the paused members' lanes


def test_the_mlflow_link_sweep_run_prints_opens_the_trial_runs(
    page: Page, tmp_path: Path, mlflow_template: Path
) -> None:
    """The link ``sweep run`` prints under "Open MLflow:" for a tracking server (taken from
    its output; ``hyperfleet mlflow --sweep`` prints the same one): MLflow 3 opens it on the
    training runs table, with the trials' runs by name, not on its GenAI overview of traces."""
    mlflow = MlflowServer(tmp_path / "mlflow", mlflow_template)
    mlflow.start()
    try:
        storage = f"sqlite:///{tmp_path / 'hf.db'}"
        path = tmp_path / "linked.yaml"
        path.write_text(yaml.safe_dump({**LINKED, "storage": storage, "workdir": str(tmp_path)}))
        run = invoke("sweep", "run", str(path), "--tracking-uri", mlflow.uri)
        assert run.exit_code == 0, run.stderr[-3000:]
        lines = run.stdout.splitlines()  # the summary and its hints (stderr with --json)
        link = lines[lines.index("Open MLflow:") + 1].strip()  # on a line of its own
        assert link.startswith(f"{mlflow.uri}/#/experiments/"), run.stdout[-2000:]
        args = ["mlflow", "--storage", storage, "--sweep", LINKED["name"]]
        shown = invoke(*args, "--tracking-uri", mlflow.uri)
        assert shown.exit_code == 0 and shown.stdout.strip() == f"MLflow: {link}", shown.stderr
        page.driver.get(link)
        trials = Storage.open_readonly(storage).trials.of(LINKED["name"])
        page.wait(lambda: f"{len(trials) + 1} matching runs" in page.body, "the runs table")
        expand = page.css(f"button[data-component-id*='{EXPAND_RUN}']")  # the sweep's run
        assert len(expand) == 1, page.shot("7-mlflow-runs")
        expand[0].click()
        names = [f"trial-{t.number:04d}" for t in trials]
        page.wait(lambda: all(n in page.body for n in names), "every trial's run listed")
        path = page.shot("7-mlflow-runs")
        assert "/runs?workflowType=machine_learning" in page.driver.current_url, path
    finally:
        mlflow.stop()
