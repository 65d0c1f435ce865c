"""How long the dashboard's Sweep page takes to render for the quickstart sweep.

Runs ``examples/quickstart.yaml`` (8 digits trials, 2-process DDP each) with ``hyperfleet
sweep run`` in a temporary directory (or reuses a storage given with ``--storage``), then
renders the Sweep page with Streamlit's own script runner (``AppTest``, the page's whole
script: queries, the in-memory study, every chart, the trials table) ``--runs`` times in one
session. The first render is cold (nothing cached); the second and later ones are warm: the
charts cached by the finished trials' fingerprint, and, after a pause longer than the reads'
2 s cache (``--pause``, default 2.5 s), the page's reads done again, as a user who comes back
to the page sees it. Prints each render's wall and CPU seconds and the median of the warm
ones against the goal of 2 s.

Usage: ``python benchmarks/bench_dashboard_render.py [--runs 6] [--pause 2.5]
[--storage URL --sweep NAME | --keep DIR]`` (``--keep``: run the quickstart in DIR once, then
reuse it)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "hyperfleet" / "dashboards" / "app.py"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
GOAL_S = 2.0


def run_quickstart(where: Path) -> str:
    """The quickstart sweep run in ``where`` (its relative stores land there); its storage."""
    cli = Path(sys.executable).parent / "hyperfleet"
    started = time.perf_counter()
    proc = subprocess.run(
        [str(cli), "sweep", "run", str(QUICKSTART)],
        cwd=where, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"the quickstart sweep failed:\n{proc.stderr[-3000:]}")
    print(f"quickstart sweep: {time.perf_counter() - started:.0f} s")
    return f"sqlite:///{where / 'hyperfleet-runs' / 'hyperfleet.db'}"


def render_times(storage: str, sweep: str, runs: int, pause: float) -> list[tuple[float, float]]:
    """``(wall s, CPU s)`` of each of ``runs`` renders of the Sweep page, the first cold."""
    from streamlit.testing.v1 import AppTest

    os.environ["HYPERFLEET_STORAGE"] = storage
    at = AppTest.from_file(str(APP), default_timeout=300).run()
    at.session_state["sweep"] = sweep
    at.switch_page("views/sweep.py")
    times = []
    for i in range(runs):
        if i:
            time.sleep(pause)  # the reads' cache expires: a warm render reads storage again
        wall, cpu = time.perf_counter(), time.process_time()
        at.run()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
        if at.exception:
            sys.exit(f"the page raised: {at.exception[0].value}")
    if not at.get("plotly_chart"):
        sys.exit("the page drew no chart: is the sweep finished?")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="renders, the first cold")
    parser.add_argument("--storage", help="a storage that holds the sweep already")
    parser.add_argument("--keep", help="run the quickstart in this directory and keep it")
    parser.add_argument("--sweep", default="quickstart")
    parser.add_argument("--pause", type=float, default=2.5, help="seconds between renders")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hf-bench-render-") as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        os.chdir(where)  # the page finds a stored relative path from the storage's directory
        done = where / "hyperfleet-runs" / "hyperfleet.db"
        storage = args.storage or (f"sqlite:///{done}" if done.is_file() else run_quickstart(where))
        times = render_times(storage, args.sweep, max(2, args.runs), args.pause)
    for i, (wall, cpu) in enumerate(times):
        print(
            f"render {i + 1} ({'cold' if i == 0 else 'warm'}): {wall:.3f} s wall, {cpu:.3f} s CPU"
        )
    warm = [w for w, _ in times[1:]]
    median = statistics.median(warm)
    cpu = statistics.median(c for _, c in times[1:])
    verdict = "within" if median < GOAL_S else "OVER"
    print(
        f"Sweep page, warm: median {median:.3f} s wall ({cpu:.3f} s CPU) over {len(warm)} "
        f"renders; {verdict} the goal of {GOAL_S:g} s"
    )


if __name__ == "__main__":
    main()
