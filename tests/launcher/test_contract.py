"""Every launcher passes the launcher contract suite (:mod:`hyperfleet.testing.launchers`):
the simulated one on a virtual clock, and the three that run real trial processes (in-process
workers, one torchrun per trial, warm torchrun groups), each sharing one launcher over its
tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hyperfleet.platform.clock import VirtualClock
from hyperfleet.platform.launcher.base import Launcher
from hyperfleet.platform.launcher.inprocess import InProcessLauncher
from hyperfleet.platform.launcher.simulated import SimulatedLauncher
from hyperfleet.platform.launcher.torchrun import TorchrunLauncher
from hyperfleet.platform.launcher.warm import WarmTorchrunLauncher
from hyperfleet.testing.launchers import (
    LauncherContract,
    QuietRecorder,
    contract_script,
    launcher_fixture,
)


class TestSimulated(LauncherContract):
    runs_processes = False

    @pytest.fixture(scope="class")
    @classmethod
    def clock(cls) -> VirtualClock:
        return VirtualClock()

    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls, clock: VirtualClock) -> Iterator[Launcher]:
        launcher = SimulatedLauncher(clock, contract_script, QuietRecorder)
        yield launcher
        launcher.close()


@pytest.mark.slow
@pytest.mark.xdist_group("launcher-contract-inprocess")
class TestInProcess(LauncherContract):
    devices = 0
    launcher = launcher_fixture(lambda: InProcessLauncher(1))


@pytest.mark.slow
@pytest.mark.xdist_group("launcher-contract-torchrun")
class TestTorchrun(LauncherContract):
    launcher = launcher_fixture(TorchrunLauncher)


@pytest.mark.slow
@pytest.mark.xdist_group("launcher-contract-warm")
def _no_groups_left(launcher: Launcher) -> None:
    assert isinstance(launcher, WarmTorchrunLauncher) and not launcher.groups


class TestWarm(LauncherContract):
    launcher = launcher_fixture(WarmTorchrunLauncher, _no_groups_left)
