"""Elastic trials resized by a real worker: gloo trial processes under torch's launcher on four
CPU slots, the worker's policy deciding, each resize made at the trial's next report.

One scenario, run once for the module's tests:

1. ``grow`` (``devices: {min: 1, max: 4}``, digits, ``batch_size: 32``: sizes 1, 2 and 4) and
   ``filler`` (one device, fewer steps) start together. ``grow`` runs at 1, then grows onto
   the 2 devices left idle (3 does not split its batch), then onto all 4 once ``filler``
   ended (``filler`` holds at its last report until ``grow`` runs at 2, so that a slow start
   of the 2-rank group cannot turn the first growth into one to 4).
2. Once ``grow`` reported ``min_interval`` times at 4, ``fixed`` arrives: the same trial as
   ``grow`` on one device, the reference curve. Its trial waits; ``grow`` gives 2 devices
   back at its next report, and takes them again if ``fixed`` ends before it does.
3. ``grow`` waits after each report until ``fixed`` completed, then runs to its end: however
   loaded the machine, it cannot end before the scenario has played out.

Tolerances: the loss within 1e-4 relative of the fixed-size run's, the validation accuracy
equal (as ``tests/trials/test_resize_resume.py``: the mean over ranks of per-rank means
reassociates float sums).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller.pace import Timing
from hyperfleet.platform.controller.sources import Until
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.sweeps.run import submit_sweep
from hyperfleet.platform.worker import run_worker
from hyperfleet.testing.sweeps import digits_sweep

pytestmark = pytest.mark.slow

EVERY = 5  # steps between reports
STEPS = 600  # of grow and fixed (longer runs drift past the curve's tolerance: float sums)
FILLER_STEPS = 300
WAIT = 0.4  # seconds after each report of filler
GROW_WAIT = 0.8  # ... and of grow until fixed completed: 96 s of reports at the least
FILLER_RELEASE = "filler-release"  # under runs/: filler's hold at its last report ends
GROW_UNPACED = "grow-unpaced"  # under runs/: grow's waits after its reports end
WORKLOAD = "tests.integration.elastic_workloads:paced_digits"
RESIZER = "hyperfleet.platform.controller.resizing"
LAUNCHED = re.compile(  # a warm launch's first line in the trial's log (warm_group.py)
    r"^# hyperfleet launch: warm group (\d+) \(pid \d+, (\d+) rank\(s\) on ([^,)]+(?:, "
    r"[a-z]+:\d+)*)(, started ahead)?\), trial \d+ in it$",
    re.M,
)


def _sweep(
    name: str, runs: Path, devices: Any, steps: int, wait: float, **params: Any
) -> dict[str, Any]:
    return digits_sweep(
        name=name,
        scheduler={"type": "random", "seed": 0},
        space={"lr": {"type": "categorical", "choices": [0.01]}},
        budget={"trials": 1, "max_concurrent": 1},
        trial={
            "workload": WORKLOAD, "steps": steps, "eval_every": EVERY,
            "params": {"batch_size": 32, "hidden": 32, "report_wait": wait, **params},
            "resources": {"devices": devices},
        },
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        workdir=str(runs),
    )  # fmt: skip


@dataclass
class Scenario:
    runs: Path
    storage: Storage
    decisions: list[logging.LogRecord] = field(default_factory=list)
    fixed_submitted_at: float = 0.0
    error: BaseException | None = None


class _Decisions(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


def _sizes(storage: Storage) -> list[list[int]]:
    rec = storage.trials.get("grow", 0)
    return (rec.sizes or []) if rec is not None else []


def _wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _arrive(s: Scenario, cfgs: dict[str, Any], url: str) -> None:
    """``filler`` is let go once ``grow`` runs at 2; ``fixed`` is submitted once ``grow`` has
    reported ``min_interval`` (3) times at 4; ``grow``'s pacing ends once ``fixed`` completed."""
    try:
        _wait_for(lambda: any(r == 2 for _, r in _sizes(s.storage)), 240, "grow at 2 devices")
        (s.runs / FILLER_RELEASE).touch()
        _wait_for(lambda: any(r == 4 for _, r in _sizes(s.storage)), 240, "grow at 4 devices")
        at4 = next(step for step, r in _sizes(s.storage) if r == 4)
        rec = lambda: s.storage.trials.get("grow", 0)  # noqa: E731
        _wait_for(lambda: (rec().last_step or 0) >= at4 + 2 * EVERY, 120, "3 reports at 4")
        submit_sweep(cfgs["fixed"], url, cfgs["fixed"].tracking.uri)
        s.fixed_submitted_at = time.time()
        done = lambda: getattr(s.storage.trials.get("fixed", 0), "state", None)  # noqa: E731
        _wait_for(lambda: done() == "COMPLETE", 300, "fixed completed")
    except BaseException as exc:  # noqa: BLE001 - the test reports it
        s.error = exc


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    runs = tmp_path_factory.mktemp("elastic") / "runs"
    runs.mkdir()
    url = f"sqlite:///{runs / 'hf.db'}"
    unpaced = str(runs / GROW_UNPACED)
    hold = {"hold_file": str(runs / FILLER_RELEASE), "hold_at": FILLER_STEPS - EVERY}
    cfgs = {
        "grow": parse_sweep(
            _sweep("grow", runs, {"min": 1, "max": 4}, STEPS, GROW_WAIT, paced_until=unpaced)
        ),
        "filler": parse_sweep(_sweep("filler", runs, 1, FILLER_STEPS, WAIT, **hold)),
        "fixed": parse_sweep(_sweep("fixed", runs, 1, STEPS, 0.0)),
    }
    for name in ("grow", "filler"):
        submit_sweep(cfgs[name], url, cfgs[name].tracking.uri)
    s = Scenario(runs, Storage(url))
    handler = _Decisions(s.decisions)
    resizer = logging.getLogger(RESIZER)
    resizer.addHandler(handler)
    level = resizer.level
    resizer.setLevel(logging.INFO)
    arrival = threading.Thread(target=_arrive, args=(s, cfgs, url), daemon=True)
    arrival.start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            # a growth waits for its group however long a loaded machine takes to start it
            patch.setattr(f"{RESIZER}.AHEAD_WAIT_S", 300.0)
            run_worker(
                url, LocalPool.slots(4), tracking_uri=cfgs["grow"].tracking.uri,
                until=Until(done=False, idle=3.0), timing=Timing(rescan_every=0.5),
            )  # fmt: skip
        arrival.join(timeout=5)
        if s.error is not None:
            raise s.error
        yield s
    finally:
        resizer.removeHandler(handler)
        resizer.setLevel(level)
        s.storage.close()


def _leases(storage: Storage, sweep: str) -> list[Any]:
    return sorted(storage.leases.all(sweep), key=lambda lease: lease.id)


def _history(runs: Path, sweep: str, metric: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name(sweep)
    assert exp is not None
    children = [
        r
        for r in client.search_runs([exp.experiment_id])
        if r.data.tags.get("hyperfleet.sweep") == sweep and "mlflow.parentRunId" in r.data.tags
    ]
    assert len(children) == 1, f"{sweep}: {len(children)} trial runs"
    return sorted(client.get_metric_history(children[0].info.run_id, metric), key=lambda m: m.step)


def test_a_trial_grows_1_2_4_then_shrinks_with_the_curve_of_a_fixed_size_run(
    scenario: Scenario,
) -> None:
    s = scenario
    for sweep in ("grow", "filler", "fixed"):
        rec = s.storage.trials.get(sweep, 0)
        assert (
            rec is not None
            and rec.state == "COMPLETE"
            and rec.last_step == (FILLER_STEPS if sweep == "filler" else STEPS)
        ), (sweep, rec)
    sizes = _sizes(s.storage)
    assert [r for _, r in sizes] in ([1, 2, 4, 2], [1, 2, 4, 2, 4]), sizes
    assert [step for step, _ in sizes] == sorted({step for step, _ in sizes})

    # one MLflow run, each step once, its size at each step as storage says
    world = _history(s.runs, "grow", "world_size")
    steps = [m.step for m in world]
    assert steps == list(range(EVERY, STEPS + 1, EVERY))
    rec = s.storage.trials.get("grow", 0)
    assert rec is not None
    assert [int(m.value) for m in world] == [rec.size_at(step) for step in steps]

    # the curve of the trial that stayed on one device
    for metric, tolerance in (("loss", 1e-4), ("val_accuracy", 0.0)):
        got = [(m.step, m.value) for m in _history(s.runs, "grow", metric)]
        want = [(m.step, m.value) for m in _history(s.runs, "fixed", metric)]
        assert [st for st, _ in got] == [st for st, _ in want] == steps
        for (step, a), (_, b) in zip(got, want, strict=True):
            assert a == pytest.approx(b, rel=tolerance, abs=0.0), (metric, step, a, b)
    # every launch a lease of its size
    assert [len(lease.devices) for lease in _leases(s.storage, "grow")] == [r for _, r in sizes]


def test_a_waiting_trial_gets_devices_from_an_elastic_one_within_a_report_interval(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    s = scenario
    shrink = [r for r in s.decisions if "resizes 4 -> 2" in r.getMessage()]
    assert len(shrink) == 1, [r.getMessage() for r in s.decisions]
    (fixed,) = _leases(s.storage, "fixed")
    # grow's reports at 4 devices: the longest interval between two in a row
    world = _history(s.runs, "grow", "world_size")
    interval = max(
        (b.timestamp - a.timestamp) / 1000
        for a, b in itertools.pairwise(world)
        if a.value == b.value == 4 and b.step - a.step == EVERY
    )
    waited = fixed.started_at - shrink[0].created
    with capsys.disabled():
        print(f"\nwaiting trial started {waited:.1f} s after the decision (grow's longest "
              f"report interval at 4 devices: {interval:.1f} s)")  # fmt: skip
    # decided within a tick of the waiting trial being seen (its sweep found at a rescan)
    # (a rescan is every 0.5 s; bounds with room for a loaded machine)
    assert shrink[0].created - s.fixed_submitted_at < 10.0
    # its devices within one report interval, and the time grow's group takes to end
    assert waited < interval + 10.0, (waited, interval)


def _resizes(s: Scenario) -> list[tuple[logging.LogRecord, logging.LogRecord | None, Any]]:
    """Each relaunch's first decision (a pending growth may be enlarged before it is made),
    the log record saying its processes were ready (a growth's), and the relaunch."""
    decided = [r for r in s.decisions if "at its next report" in r.getMessage()]
    ready = [r for r in s.decisions if "after the decision" in r.getMessage() and "ready" in
             r.getMessage()]  # fmt: skip
    made = [r for r in s.decisions if "s after the decision;" in r.getMessage()]
    out, since = [], 0.0
    for relaunch in made:
        first = next(r for r in decided if since <= r.created <= relaunch.created)
        said = [r for r in ready if first.created <= r.created <= relaunch.created]
        out.append((first, said[-1] if said else None, relaunch))
        since = relaunch.created
    return out


def test_each_relaunch_runs_in_processes_started_at_the_decision(scenario: Scenario) -> None:
    """A growth is carried to the trial once the warm group of its new size, started at the
    decision on the devices it will hold, is ready; a shrink at once; every relaunch runs in
    the group started for it (the trial's log names each launch's group)."""
    s = scenario
    resizes = _resizes(s)
    assert len(resizes) == len(_sizes(s.storage)) - 1 >= 3
    for _, ready, relaunch in resizes:
        assert "its processes started ahead" in relaunch.getMessage(), relaunch.getMessage()
        before, after = (int(n) for n in relaunch.args[2:4])  # type: ignore[index]
        if after > before:
            assert ready is not None and "not ready" not in ready.getMessage(), ready
        else:
            assert ready is None
    rec = s.storage.trials.get("grow", 0)
    assert rec is not None and rec.trial_dir
    groups = LAUNCHED.findall((Path(rec.trial_dir) / "log.txt").read_text())
    leases = _leases(s.storage, "grow")
    assert len(groups) == len(leases)
    assert [ahead for *_, ahead in groups] == ["", *([", started ahead"] * (len(leases) - 1))]
    assert [(int(n), on.split(", ")) for _, n, on, _ in groups] == [
        (len(lease.devices), lease.devices) for lease in leases
    ]
    assert len({index for index, *_ in groups}) == len(groups)  # a group of its own each


def test_what_each_resize_costs(scenario: Scenario, capsys: pytest.CaptureFixture[str]) -> None:
    """Seconds from each decision to the processes of the new size ready (a growth waits for
    them), to the trial's next report (where it stops), to its relaunch at the new size, and
    to its first report there (its checkpoint loaded, ``EVERY`` steps trained); and the
    trial's pause, from the report where it stopped to its first at the new size. Printed as
    the table of docs/elastic.md (run with -s)."""
    s = scenario
    world = _history(s.runs, "grow", "world_size")
    rows = []
    for decision, ready, relaunch in _resizes(s):
        before, after = (int(n) for n in relaunch.args[2:4])  # type: ignore[index]
        at = int(relaunch.args[4])  # type: ignore[index]
        first = next(m for m in world if m.step > at)
        assert int(first.value) == after
        stopped = next(m for m in world if m.step == at).timestamp / 1000
        since = [x - decision.created for x in (stopped, relaunch.created,
                                                 first.timestamp / 1000)]  # fmt: skip
        # a shrink is carried at once: the report that stops the trial may have stamped its
        # metrics a moment before the request landed
        assert -1.0 < since[0] <= since[1] <= since[2] < 120, since
        ready_s = "-" if ready is None else f"{ready.created - decision.created:.1f} s"
        rows.append(f"| {before} -> {after} | {ready_s} | {since[0]:.1f} s | {since[1]:.1f} s "
                    f"| {since[2]:.1f} s | {since[2] - since[0]:.1f} s |")  # fmt: skip
    first_launch = _leases(s.storage, "grow")[0].started_at
    with capsys.disabled():
        print(f"\nfirst launch: {world[0].timestamp / 1000 - first_launch:.1f} s to its first "
              "report")  # fmt: skip
        print("| resize | processes ready | to its next report | to its relaunch "
              "| to its first report there | paused |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- |")
        print("\n".join(rows))
