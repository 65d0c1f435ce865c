"""Issue #50: one sweep's configuration problem is that sweep's problem on that host. A sweep
whose ``trial.command`` names a relative script that exists only in its submitter's directory
is submitted while workers started elsewhere serve another sweep: a worker without the script
says so once, does not serve that sweep, and goes on serving the other, which finishes its
budget; the sweep is served where the script is, and is never shown done before its budget
is reached."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.fleet.conftest import Fleet, Worker

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCRIPT = "import sys\nfor s in (1, 2):\n    print(f'step={s} loss={0.5 / s}', flush=True)\n"
SKIPPED = "not serving sweep b"


def _dirs(fleet: Fleet) -> tuple[Path, Path]:
    """The submitter's directory (with ``train.py``) and another one (without)."""
    mine, other = fleet.root / "submitter", fleet.root / "elsewhere"
    mine.mkdir()
    other.mkdir()
    (mine / "train.py").write_text(SCRIPT)
    return mine, other


def _sweeps(fleet: Fleet, trials: int) -> tuple[Path, Path]:
    hold = {"hold_file": str(fleet.root / "release"), "hold_at": 1}
    a = minimal_sweep(
        name="a", budget={"trials": trials, "max_concurrent": trials}, trial={"params": hold}
    )
    b = minimal_sweep(
        name="b",
        budget={"trials": 2, "max_concurrent": 1},
        trial={"workload": None, "command": ["python", "train.py"], "steps": 2},
    )
    return fleet.sweep(a, "a.yaml"), fleet.sweep(b, "b.yaml")


def _submit_from(fleet: Fleet, path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:  # `sweep submit` checks the script from where it runs
        m.chdir(cwd)
        fleet.submit(path)


def _status(fleet: Fleet, name: str) -> Any:
    st = fleet.storage()
    try:
        row = st.sweeps.get(name)
        return None if row is None else row.status
    finally:
        st.close()


def _complete(fleet: Fleet, name: str) -> int:
    return sum(t.state == TrialState.COMPLETE for t in fleet.trials(name).values())


def _held(fleet: Fleet, n: int) -> bool:
    return sum(held_marker(fleet.root / "release", i).exists() for i in range(8)) >= n


def _a_finishes_beside_b(fleet: Fleet, trials: int, skipping: Worker) -> None:
    """A's held trials are released and A reaches its budget; ``skipping`` (a worker without
    B's script) is alive throughout and said once why it does not serve B."""
    fleet.wait(lambda: SKIPPED in skipping.text(), 120, "the worker to say it skips sweep b")
    assert skipping.proc.poll() is None, skipping.text()[-3000:]
    (fleet.root / "release").touch()
    fleet.wait(lambda: _complete(fleet, "a") == trials, 300, f"sweep a's {trials} trials")
    fleet.wait(lambda: _status(fleet, "a") == SweepStatus.DONE, 120, "sweep a done")
    assert skipping.proc.poll() is None, skipping.text()[-3000:]
    lines = [line for line in skipping.text().splitlines() if SKIPPED in line]
    assert len(lines) == 1, lines
    assert "train.py" in lines[0] and "trial.command" in lines[0], lines[0]


def test_a_worker_without_a_sweeps_script_skips_it_and_serves_the_others(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker, started where B's script is not: it serves A to its budget, says once
    that it does not serve B, and leaves B queued (not done) for a worker that can."""
    mine, other = _dirs(fleet)
    a, b = _sweeps(fleet, 2)
    fleet.submit(a)
    # idle long enough to be seen alive once sweep a is done (two storage reads on a busy
    # machine outlasted 3 s), and still to exit by itself
    w = fleet.start("elsewhere", "--exit-when-idle", "20s", cwd=other)
    fleet.wait(lambda: _held(fleet, 2), 180, "sweep a's trials running")
    _submit_from(fleet, b, mine, monkeypatch)
    _a_finishes_beside_b(fleet, 2, w)
    assert w.proc.wait(timeout=120) == 0, w.text()[-3000:]
    assert _status(fleet, "b") == SweepStatus.SUBMITTED
    assert fleet.trials("b") == {}


@pytest.mark.long
def test_a_sweeps_script_problem_stays_on_the_workers_that_lack_it(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, one started where B's script is, one elsewhere, both serving A when B is
    submitted: A finishes its budget on both, the one without the script skips B with one
    line and stays, the other runs B to its budget."""
    mine, other = _dirs(fleet)
    a, b = _sweeps(fleet, 4)
    fleet.submit(a)
    here = fleet.start("submitter", cwd=mine)
    there = fleet.start("elsewhere", cwd=other)
    fleet.wait(lambda: _held(fleet, 4), 180, "sweep a's trials running")
    owners = {t.worker for t in fleet.trials("a").values() if t.state == TrialState.RUNNING}
    assert owners == {here.id(fleet), there.id(fleet)}  # two devices each: both serve A
    _submit_from(fleet, b, mine, monkeypatch)
    _a_finishes_beside_b(fleet, 4, there)
    fleet.wait(lambda: _complete(fleet, "b") == 2, 300, "sweep b run by the worker with its script")
    fleet.wait(lambda: _status(fleet, "b") == SweepStatus.DONE, 120, "sweep b done")
    assert SKIPPED not in here.text()
    for w in (here, there):
        assert w.proc.poll() is None, w.text()[-3000:]
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=120) in (0, 130), w.text()[-3000:]
