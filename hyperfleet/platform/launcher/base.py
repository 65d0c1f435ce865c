"""The launcher interface: the controller's only way to start and stop a trial's processes.

A :class:`Launcher` turns a trial spec and a device lease into a running trial and returns its
:class:`TrialHandle` at once; the controller polls handles, stops them on interrupt or time
limit, and reads the outcome the trial's rank 0 recorded in storage. Implementations:

* :class:`~.warm.WarmTorchrunLauncher` — PyTorch's elastic launcher; a trial's process group
  is kept after it ends and runs the next trial of the same layout (what sweeps use);
* :class:`~.torchrun.TorchrunLauncher` — one torchrun process group per trial;
* :class:`~.inprocess.InProcessLauncher` — cheap trials (``resources.devices: 0``) in a pool of
  warm worker processes;
* :class:`~.simulated.SimulatedLauncher` — no processes at all: scripted reports on a virtual
  clock, through the same recorder, so the controller's rules are tested in milliseconds.

The controller never branches on which one it was given, nor probes them for what they can do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from hyperfleet.platform.pool import Lease
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec

STOP_GRACE_S = 10.0  # SIGTERM to SIGKILL when a trial is stopped (``TrialHandle.stop``)
LOG_TAIL_LINES = 30  # the lines of a trial's log an error message quotes


class TrialHandle(ABC):
    """One launched trial. Subclass it: the controller reads ``starting`` and ``log_path``
    of every handle and calls every method below, on any launcher's handles alike."""

    @property
    def starting(self) -> bool:
        """True while the trial's processes are still starting (a warm worker that has not
        taken the trial yet): ``trial.timeout`` does not run meanwhile. Default: False."""
        return False

    log_path: Path | None = None
    """The trial's log file, if it has one (a note beside it marks a trial stopped while its
    record could not be written: :func:`~hyperfleet.platform.controller.recovery.mark_stopped`)."""

    @abstractmethod
    def poll(self) -> int | None:
        """The exit code once every process of the trial has ended, else None."""

    @abstractmethod
    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """Ask the trial to stop (it checkpoints what it can), kill what is left after
        ``grace`` seconds; returns the exit code."""

    @abstractmethod
    def kill(self) -> int:
        """End every process of the trial now; returns the exit code."""

    @abstractmethod
    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the trial's log (for an error message)."""


@dataclass(frozen=True)
class Rendezvous:
    """How the nodes of a trial that spans hosts find each other (torchrun's c10d
    rendezvous): ``nodes`` agents meet at ``endpoint`` under ``rdzv_id``; the leader's agent
    (``is_host``) serves the rendezvous store; each waits at most ``join_timeout`` seconds
    for the others. ``min_nodes`` (an elastic trial's ``nodes: {min, max}``): after a node is
    lost, the agents left meet again and continue while they are at least this many."""

    endpoint: str
    rdzv_id: str
    nodes: int
    is_host: bool
    join_timeout: float
    min_nodes: int | None = None


class Launcher(ABC):
    """Starts trials and hands back their handles. Subclass it: ``launch`` and ``close`` are
    required; ``prestart``, ``start_ahead`` (and ``ready_ahead``), ``wait`` and
    ``next_event_in`` are optional capabilities whose defaults do nothing (the controller calls
    them on every launcher, never asking which kind it has).
    :mod:`hyperfleet.testing.launchers` is the contract suite every launcher passes."""

    @abstractmethod
    def launch(
        self, spec: TrialSpec, lease: Lease, rendezvous: Rendezvous | None = None
    ) -> TrialHandle:
        """Start the trial of ``spec`` (already written to ``spec.path``) on ``lease``'s
        devices — this host's share of it when ``rendezvous`` joins other hosts; returns at
        once."""

    @abstractmethod
    def close(self) -> None:
        """Release what the launcher holds (worker pools); running trials were stopped."""

    def launch_problem(self, trial: TrialConfig, ranks: int, address: str | None) -> str | None:
        """Why a trial of ``ranks`` processes on this host (``address``: the one this worker
        advertises to other hosts, for a trial that spans hosts) cannot meet here, in one
        line, or None; the controller fails such a trial with it instead of launching a
        process group that would wait forever."""
        return None

    def prestart(self, leases: list[Lease], trial: TrialConfig) -> None:
        """Start now the processes the first trials (of ``trial``, on ``leases``) will most
        likely run in, so their start-up overlaps the controller's (default: nothing)."""
        return None

    def start_ahead(self, lease: Lease, trial: TrialConfig) -> bool:
        """Start now the processes a launch of ``trial`` on exactly ``lease``'s devices will
        run in (an elastic trial's relaunch at its new size, decided before its current
        launch ends); True when it did. Default: nothing started (False), the launch is cold."""
        return False

    def ready_ahead(self, lease: Lease, trial: TrialConfig) -> bool:
        """Whether the processes :meth:`start_ahead` started for ``trial`` on ``lease`` are
        ready to run it (True when none is starting: nothing to wait for)."""
        return True

    def wait(self, timeout: float) -> bool:
        """Block until one of this launcher's trials may have something to say (it ended),
        or ``timeout`` seconds; True when it waited. The default returns False at once: the
        launcher cannot tell, so the controller waits on its own clock instead."""
        return False

    def next_event_in(self) -> float | None:
        """Seconds until one of its running trials next has something to say (a report, its
        end; ``math.inf``: none will), when the launcher knows it in advance, as a simulated
        trial's script does: the controller then sleeps until then instead of polling every
        ``poll_every``, so a thousand worker loops of simulated trials do not tick ten times a
        second each. Default None: it cannot tell (real processes), the controller polls."""
        return None


class NoProcess(TrialHandle):
    """The handle of a trial rejected before launch: it never ran."""

    def poll(self) -> int | None:
        return 1

    def stop(self, grace: float = 0.0) -> int:
        return 1

    def kill(self) -> int:
        return 1

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return ""


def read_tail(path: Path, lines: int = LOG_TAIL_LINES, end: int | None = None) -> str:
    """The last ``lines`` lines of a log file, or of its first ``end`` bytes ("" if it can't
    be read)."""
    try:
        with path.open("rb") as f:
            data = f.read() if end is None else f.read(end)
    except OSError:
        return ""
    return last_lines(data.decode(errors="replace"), lines)


def last_lines(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])
