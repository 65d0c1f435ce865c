"""Issue #26, findings 4 and 6: orphans of in-process trials, a full disk, ``storage_retry``
governing every component through a real PostgreSQL outage, and the MLflow points of a killed
trial copy. Real ``hyperfleet sweep run`` processes and trial processes (the workloads of
``tests/faults/ops_workloads.py``); each test checks the fault suite's invariants."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from hyperfleet.platform.launcher.procs import TRIAL_VAR, trial_tag
from tests.conftest import deep_update
from tests.faults.conftest import Fault, wait_dead, wait_until
from tests.faults.pg import PgCluster
from tests.integration.cli import cli

FaultMaker = Callable[..., Fault]
WORKLOAD = "tests.faults.ops_workloads:main"


def ops_sweep(fault: FaultMaker, name: str, changes: dict[str, Any] | None = None) -> Fault:
    """A fault sweep named ``name`` of the ops workloads, with ``changes`` merged in."""
    return fault(deep_update({"name": name, "trial": {"workload": WORKLOAD}}, changes or {}))


def held_on(
    cluster: PgCluster, fault: FaultMaker, name: str, retry: str, budget: dict[str, Any]
) -> tuple[Fault, subprocess.Popen[str], str]:
    """An ops sweep on ``cluster``'s PostgreSQL that rides out an outage for ``retry``,
    started and returned once its two trials hold at step 2 (until the file ``hold``, also
    returned, exists)."""
    hold = f"{fault().root}/go"
    f = ops_sweep(fault, name, {
        "storage": cluster.url, "storage_retry": retry, "budget": budget,
        "trial": {"params": {"hold": hold, "hold_step": 2}},
    })  # fmt: skip
    return f, f.start_held(timeout=180), hold


def tagged_with_sweep(f: Fault) -> list[int]:
    """Live processes carrying a trial tag of ``f``'s sweep (psutil over all processes)."""
    tags = {trial_tag(f.storage, str(f.data["name"]), n) for n in range(16)}
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TRIAL_VAR) in tags:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def children_of(pids: set[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        try:
            out |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue
    return out


def ends_in_one_line(stderr: str, start: str) -> None:
    """No traceback; one-line warnings while it lasted; one error line, starting ``start``."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(start), stderr[-3000:]
    logged = [line for line in stderr.splitlines() if line.strip() and line not in errors]
    assert all(" WARNING: " in line or " INFO: " in line for line in logged), stderr[-3000:]


# 4 -- orphans ------------------------------------------------------------------------------


def test_4_what_an_in_process_trial_starts_ends_with_it(fault: FaultMaker) -> None:
    f = ops_sweep(fault, "orphans", {
        "budget": {"trials": 3, "max_concurrent": 2},
        "trial": {"params": {"mode": "spawn"}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    children = {int(v) for _, _, v in f.marks.events("child")}
    assert len(children) == 6  # a sleep and a fork per trial
    kin = {int(v) for _, _, v in f.marks.events("kin")}
    assert kin > children  # the workers' guards too
    wait_dead(kin, timeout=5)
    assert tagged_with_sweep(f) == []
    f.check_clean(budget=3)


def test_4_a_killed_controller_takes_its_trials_children_along(fault: FaultMaker) -> None:
    hold = f"{fault().root}/go"
    f = ops_sweep(fault, "orphans-killed", {
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"params": {"mode": "spawn", "hold": hold, "hold_step": 2}},
    })  # fmt: skip
    proc = f.start_held()
    workers = f.marks.pids()
    everything = workers | children_of(workers) | {int(v) for _, _, v in f.marks.events("child")}
    assert len(everything) >= 2 + 4  # workers, sleeps, forks (and the workers' guards)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_dead(everything, timeout=15)
    assert tagged_with_sweep(f) == []
    Path(hold).touch()
    result = f.run()  # the same command finishes the budget
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    wait_dead({int(v) for _, _, v in f.marks.events("child")}, timeout=5)
    assert tagged_with_sweep(f) == []
    f.check_clean(budget=2)


pytestmark = [pytest.mark.slow]


# 6 -- storage_retry governs every component ------------------------------------------------


@pytest.mark.postgres
@pytest.mark.long
def test_6_storage_retry_governs_the_controller_and_the_trials(
    fault: FaultMaker, cluster: PgCluster
) -> None:
    budget = {"trials": 2, "max_concurrent": 2, "max_retries": 1}
    f, proc, hold = held_on(cluster, fault, "retry-short", "5s", budget)
    pids = f.marks.pids()
    cluster.stop()
    Path(hold).touch()  # the trials report while the server is down
    down = time.monotonic()
    _, err = proc.communicate(timeout=300)
    waited = time.monotonic() - down
    assert proc.returncode == 3, err[-3000:]
    ends_in_one_line(err, "error: storage: unreachable for")
    assert waited < 45, f"the controller waited {waited:.0f} s with storage_retry: 5s"
    wait_dead(pids)
    cluster.start()
    # nothing could be written meanwhile: left RUNNING, requeued when the sweep runs again
    assert "FAIL" not in f.states().values()
    result = f.run()  # the same command, the server back: the budget is finished
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    assert [t.state for t in trials.values()] == ["COMPLETE", "COMPLETE"]
    assert [t.retries for t in trials.values()] == [0, 0], "no retry burnt by the outage"
    froms = {n: [v for t, _, v in f.marks.events("from") if t == n] for n in (0, 1)}
    assert all(v[0] == "0" and v[-1] != "0" for v in froms.values()), froms  # resumed
    f.check_clean(budget=2)


@pytest.mark.postgres
@pytest.mark.long
def test_6_an_outage_shorter_than_storage_retry_is_ridden_out(
    fault: FaultMaker, cluster: PgCluster
) -> None:
    budget = {"trials": 2, "max_concurrent": 2}
    f, proc, hold = held_on(cluster, fault, "retry-long", "40s", budget)
    cluster.stop()
    Path(hold).touch()
    time.sleep(8)  # the outage itself: what the test is about, not pacing
    assert proc.poll() is None, "the controller rides out an outage shorter than storage_retry"
    cluster.start()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    assert all(t.retries == 0 for t in f.trials().values())
    f.check_clean(budget=2)


# 6 -- the MLflow points of a killed trial copy ---------------------------------------------


def loss_steps(f: Fault) -> list[int]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    run_id = f.trials()[0].mlflow_run_id
    assert run_id and not run_id.startswith("pending:")
    return sorted(m.step for m in client.get_metric_history(run_id, "loss"))


def test_6_a_killed_copy_loses_no_mlflow_point(fault: FaultMaker) -> None:
    f = ops_sweep(fault, "killed-copy", {
        "budget": {"trials": 1, "max_concurrent": 1},
        "trial": {"steps": 5, "params": {"mode": "report_then_sleep", "marker_step": 3}},
    })  # fmt: skip
    proc = f.start()
    wait_until(lambda: bool(f.marks.events("reported")), what="step 3 reported")
    (copy,) = f.marks.pids()
    psutil.Process(copy).kill()  # the trial's copy, right after its report of step 3
    proc.send_signal(signal.SIGKILL)  # and its controller: nobody ships its spool
    proc.communicate(timeout=60)
    wait_dead({copy})
    Path(f"{f.marks.path}.killed-0").touch()
    synced = cli("mlflow", "sync", "--storage", f.storage, "--sweep", "killed-copy")
    assert synced.returncode == 0, synced.stderr[-3000:]
    assert loss_steps(f) == [1, 2, 3], "the killed copy's points, delivered by mlflow sync"
    result = f.run()  # the copy was lost: requeued and resumed after step 3
    assert result.returncode == 0, result.stderr[-3000:]
    assert f.states() == {0: "COMPLETE"}
    assert [v for _, _, v in f.marks.events("from")] == ["0", "3"]
    assert loss_steps(f) == [1, 2, 3, 4, 5], "each step once in MLflow, none lost"
    f.check_clean(budget=1)


# 6 -- a full disk --------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own (mounting needs root, as on the CI machines)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write ``disk/ballast`` until the file system is full."""
    ballast = disk / "ballast"
    with contextlib.suppress(OSError), ballast.open("wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return ballast


def test_6_a_full_disk_stops_the_sweep_in_one_line_and_requeues(
    fault: FaultMaker, small_disk: Path
) -> None:
    hold = f"{fault().root}/go"
    f = ops_sweep(fault, "full-disk", {
        "workdir": str(small_disk),
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"params": {"hold": hold, "hold_step": 2}},
    })  # fmt: skip
    proc = f.start_held()
    pids = f.marks.pids()
    ballast = fill(small_disk)
    Path(hold).touch()  # the trials save their step-2 checkpoints on a full disk
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, err[-3000:]
    ends_in_one_line(err, "error: disk full: no space left on device at ")
    assert str(small_disk) in err
    wait_dead(pids)
    trials = f.trials()
    assert [t.state for t in trials.values()] == ["WAITING", "WAITING"], "requeued, not FAIL"
    assert [t.retries for t in trials.values()] == [0, 0], "no retry burnt by the full disk"
    again = f.run()  # the disk still full: the same line, nothing burnt
    assert again.returncode == 5, again.stderr[-3000:]
    ends_in_one_line(again.stderr, "error: disk full: no space left on device at ")
    assert [t.retries for t in f.trials().values()] == [0, 0]
    ballast.unlink()
    result = f.run()  # space freed: the same command finishes the budget
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    f.check_clean(budget=2)
