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
from hyperfleet.testing.launchers import LauncherContract, QuietRecorder, contract_script


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

    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls) -> Iterator[Launcher]:
        launcher = InProcessLauncher(1)
        yield launcher
        launcher.close()


@pytest.mark.slow
@pytest.mark.xdist_group("launcher-contract-torchrun")
class TestTorchrun(LauncherContract):
    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls) -> Iterator[Launcher]:
        launcher = TorchrunLauncher()
        yield launcher
        launcher.close()


@pytest.mark.slow
@pytest.mark.xdist_group("launcher-contract-warm")
class TestWarm(LauncherContract):
    @pytest.fixture(scope="class")
    @classmethod
    def launcher(cls) -> Iterator[Launcher]:
        launcher = WarmTorchrunLauncher()
        yield launcher
        launcher.close()
        assert not launcher.groups
