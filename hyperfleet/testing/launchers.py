"""The launcher contract suite: what every :class:`~hyperfleet.platform.launcher.base.Launcher`
does, as tests a launcher's author runs against their own launcher.

Subclass :class:`LauncherContract` in a test module (a class named ``Test...``) and override its
``launcher`` fixture (:func:`launcher_fixture` makes one that closes the launcher after the
class's tests); the class's tests then run against it::

    class TestMyLauncher(LauncherContract):
        devices = 1  # what a contract trial asks for (0: an in-process trial)
        launcher = launcher_fixture(MyLauncher)

A contract trial is one of the tiny workloads of :mod:`hyperfleet.testing.launcher_workloads`
(no torch), run without stores (the runtime prints its reports). A launcher that runs no
workload (the simulated one) sets ``runs_processes = False``, gives a ``clock`` fixture (its
virtual clock, which the suite advances as the controller does) and plays
:func:`contract_script` (:class:`~hyperfleet.platform.launcher.simulated.SimulatedLauncher`
with :class:`QuietRecorder`). What is checked:

* a trial runs to its exit code (0), which ``poll`` keeps returning; ``starting`` is False then;
* a trial that cannot start (its workload does not import) ends with a non-zero code, and its
  log's tail says why;
* ``stop`` and ``kill`` end a running trial and every process it started;
* ``wait`` returns within its timeout, False only at once; ``prestart`` may be called;
* a trial launched on what ``start_ahead`` started (once ``ready_ahead``) runs to its end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hyperfleet.platform.clock import Clock, SystemClock
from hyperfleet.platform.launcher.base import Launcher, TrialHandle
from hyperfleet.platform.launcher.simulated import SimReport, SimScript, SimTrial
from hyperfleet.platform.pool import Device, Lease
from hyperfleet.spec.recorder import Recorder
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, TrialSpec

WORKLOADS = "hyperfleet.testing.launcher_workloads"
BROKEN = f"{WORKLOADS}:no_such_workload"  # a trial that cannot start
KINDS = {"completes": f"{WORKLOADS}:completes", "hangs": f"{WORKLOADS}:hangs", "broken": BROKEN}

TrialMaker = Callable[[str], TrialSpec]


def launcher_fixture(
    make: Callable[[], Launcher], check: Callable[[Launcher], None] | None = None
) -> Any:
    """A class-scoped ``launcher`` fixture for a :class:`LauncherContract` subclass: ``make()``,
    closed after the class's tests, then given to ``check`` (what its closing must leave)."""

    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls: Any) -> Iterator[Launcher]:
        made = make()
        yield made
        made.close()
        if check is not None:
            check(made)

    return launcher


def contract_script(t: SimTrial) -> SimScript:
    """The contract trials, simulated (``params.kind``): one report then exit 0, a hang, or
    a failed start (exit 1 at once)."""
    kind = t.params["kind"]
    if kind == "hangs":
        return SimScript([SimReport(0.1, 1, {"loss": 0.0})], hang=True)
    if kind == "broken":
        return SimScript([], end_at=0.0, exit_code=1)
    return SimScript([SimReport(0.1, 1, {"loss": 0.0})])


class QuietRecorder(Recorder):
    """A simulated trial's recorder that records nothing and always says continue."""

    def __init__(self, spec: TrialSpec | None = None) -> None:
        self.outcome: str | None = None

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        return CONTINUE

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        pass

    def finish(self, outcome: str) -> None:
        self.outcome = outcome

    def pinned_steps(self) -> set[int] | None:
        return set()

    def note(self, message: str, restart: bool = True) -> None:
        pass

    def check(self) -> None:
        pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class LauncherContract:
    """The contract's tests (see the module docstring); subclasses give ``launcher``."""

    devices: ClassVar[int] = 1  # a contract trial's resources.devices (0: in-process)
    runs_processes: ClassVar[bool] = True  # False: it runs no workload (simulated trials)
    timeout: ClassVar[float] = 180.0  # the longest a contract trial may take to start or end
    tick: ClassVar[float] = 0.2  # the controller's poll_every, as the suite waits

    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls) -> Iterator[Launcher]:
        raise NotImplementedError("a LauncherContract subclass gives the launcher fixture")

    @pytest.fixture(scope="class")
    @classmethod
    def clock(cls) -> Clock:
        return SystemClock()

    @pytest.fixture
    def trial(self, tmp_path: Path) -> TrialMaker:
        """``trial(kind)``: a written spec of a contract trial of that kind."""
        made: list[TrialSpec] = []

        def make(kind: str) -> TrialSpec:
            config = TrialConfig.model_validate(
                {"workload": KINDS[kind], "steps": 1, "resources": {"devices": self.devices}}
            )
            number = len(made)
            trial_dir = tmp_path / f"trial-{number:04d}"
            params = {"kind": kind, "pid_file": str(trial_dir / "contract.pids")}
            spec = TrialSpec(
                sweep="contract", number=number, trial=config, params=params,
                workdir=str(tmp_path), trial_dir=str(trial_dir),
            )  # fmt: skip
            spec.write()
            made.append(spec)
            return spec

        return make

    def lease(self) -> Lease:
        return Lease(tuple(Device("cpu", i) for i in range(max(1, self.devices))), 0)

    # -- helpers: wait as the controller does ---------------------------------------------------

    def run_to_end(self, launcher: Launcher, handle: TrialHandle, clock: Clock) -> int:
        """Poll ``handle`` until its trial ended, waiting between polls on the launcher's
        ``wait`` or else the clock (the controller's loop); its exit code."""
        deadline, stop = time.monotonic() + self.timeout, threading.Event()
        while (code := handle.poll()) is None:
            assert time.monotonic() < deadline, "the trial did not end in time"
            if not launcher.wait(self.tick):
                clock.wait(stop, self.tick)
        return code

    def started(self, launcher: Launcher, handle: TrialHandle, spec: TrialSpec) -> list[int]:
        """Wait until a ``hangs`` trial runs (it wrote its pids); those pids."""
        if not self.runs_processes:
            return []
        pid_file = Path(spec.params["pid_file"])
        deadline = time.monotonic() + self.timeout
        while not pid_file.exists():
            assert handle.poll() is None, f"the trial ended early:\n{handle.log_tail()}"
            assert time.monotonic() < deadline, "the trial did not start in time"
            if not launcher.wait(self.tick):
                time.sleep(self.tick)
        assert handle.poll() is None
        assert handle.starting is False, "a running trial is still said to be starting"
        return [int(line) for line in pid_file.read_text().split()]

    def gone(self, pids: list[int]) -> list[int]:
        """``pids`` still alive a few seconds on (a killed process takes a moment to go)."""
        deadline = time.monotonic() + 10.0
        while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    # -- the contract -------------------------------------------------------------------------

    def test_a_trial_runs_to_its_exit_code(
        self, launcher: Launcher, clock: Clock, trial: TrialMaker
    ) -> None:
        spec = trial("completes")
        handle = launcher.launch(spec, self.lease())
        assert isinstance(handle, TrialHandle)
        code = self.run_to_end(launcher, handle, clock)
        assert code == 0, handle.log_tail()
        assert handle.poll() == 0, "poll forgot the exit code"
        assert handle.starting is False
        assert isinstance(handle.log_tail(), str)
        if handle.log_path is not None:
            assert Path(handle.log_path).exists()

    def test_a_trial_that_cannot_start_is_reported_failed(
        self, launcher: Launcher, clock: Clock, trial: TrialMaker
    ) -> None:
        spec = trial("broken")
        handle = launcher.launch(spec, self.lease())
        code = self.run_to_end(launcher, handle, clock)
        assert code != 0
        if self.runs_processes:
            assert "no_such_workload" in handle.log_tail(200), handle.log_tail()

    @pytest.mark.parametrize("how", ["stop", "kill"])
    def test_a_running_trial_ends_with_every_process_it_started(
        self, launcher: Launcher, clock: Clock, trial: TrialMaker, how: str
    ) -> None:
        spec = trial("hangs")
        handle = launcher.launch(spec, self.lease())
        pids = self.started(launcher, handle, spec)
        assert handle.poll() is None, "a hanging trial ended by itself"
        code = handle.stop(grace=5.0) if how == "stop" else handle.kill()
        assert isinstance(code, int)
        assert handle.poll() is not None, f"{how} returned with the trial still running"
        assert self.gone(pids) == [], f"processes of the trial outlived {how}"
        assert pids or not self.runs_processes

    def test_wait_returns_within_its_timeout(self, launcher: Launcher) -> None:
        began = time.monotonic()
        waited = launcher.wait(0.1)
        took = time.monotonic() - began
        assert isinstance(waited, bool)
        assert took < (5.0 if waited else 0.05), f"wait(0.1) took {took:.2f} s"

    def test_prestart_may_be_called(self, launcher: Launcher) -> None:
        config = TrialConfig.model_validate(
            {"workload": KINDS["completes"], "steps": 1, "resources": {"devices": self.devices}}
        )
        launcher.prestart([], config)  # nothing to start: it returns, and breaks nothing

    def test_a_launch_on_processes_started_ahead_runs_as_any(
        self, launcher: Launcher, clock: Clock, trial: TrialMaker
    ) -> None:
        spec = trial("completes")
        ahead = launcher.start_ahead(self.lease(), spec.trial)  # may start nothing: False
        assert isinstance(ahead, bool)
        deadline = time.monotonic() + self.timeout
        while not launcher.ready_ahead(self.lease(), spec.trial):  # True once nothing starts
            assert ahead, "ready_ahead is False while start_ahead started nothing"
            assert time.monotonic() < deadline, "what start_ahead started was never ready"
            time.sleep(self.tick)
        handle = launcher.launch(spec, self.lease())
        assert self.run_to_end(launcher, handle, clock) == 0, handle.log_tail()
