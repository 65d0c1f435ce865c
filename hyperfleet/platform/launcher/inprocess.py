"""In-process trials (``trial.resources.devices: 0``): cheap objectives without a launch each.

A trial of a quick objective (a test function, a small scikit-learn model) costs less than
starting a process group. Such trials run in long-lived worker processes, started on demand
and kept warm between trials: each trial is one task that runs the same trial runtime as a
torchrun trial (same ``TrialContext``, same reports, pruning, checkpoints and MLflow run), as a
single process with no process group. Its output goes to its own log file.

Each worker runs one trial at a time and is its trial's process, so the contract is the
torchrun one: ``stop`` sends the worker SIGTERM (the trial unwinds, flushing its metrics, and
the worker exits; a fresh one replaces it), ``kill`` sends SIGKILL. Workers ignore the
terminal's SIGINT (the controller decides what an interrupt stops) and die with the
controller (Linux's parent-death signal, through the fork server that ends with it), so no
worker outlives it. Nor does anything a trial starts: each worker reaps its trial's
descendants and leads a process group that a guard kills when the worker dies
(:mod:`.procs`), and ``kill`` kills that group and the launch's tagged processes too.

Workers come from multiprocessing's *fork server*, which imports the trial runtime (torch)
and the recorder once: every worker, the first ones and each replacement, is a fork of it
(milliseconds) rather than an interpreter importing torch again (seconds of CPU each, which
the first trials of a sweep wait for). The server never runs a trial and starts no thread, so
each fork starts clean; a worker takes the controller's environment and working directory as
they are when it starts (a fork would otherwise have the server's). ``prestart`` starts them
from a thread, so the controller goes on opening the sweep while the server imports.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import threading
import time
from pathlib import Path

from hyperfleet.platform.launcher.base import LOG_TAIL_LINES, STOP_GRACE_S, read_tail
from hyperfleet.platform.launcher.procs import LAUNCH_VAR, kill_tagged, tag_launch
from hyperfleet.platform.pool import Lease
from hyperfleet.platform.trial_entry import STARTED, inprocess_worker
from hyperfleet.spec.wire import TrialSpec

_FORKS = mp.get_context("forkserver")
_FORKS.set_forkserver_preload(
    ["hyperfleet.platform.launcher.gc_paused", "hyperfleet.trials.runtime",
     "hyperfleet.platform.recorder"]
)  # fmt: skip


class _Worker:
    def __init__(self) -> None:
        self.conn, child = _FORKS.Pipe()
        place = (dict(os.environ), os.getcwd())
        args = (child, os.getpid(), place)
        self.proc = _FORKS.Process(target=inprocess_worker, args=args, daemon=True)
        self.proc.start()
        child.close()
        self.busy = False

    def alive(self) -> bool:
        return self.proc.is_alive()


class InProcessHandle:
    """One in-process trial: the worker running it and the trial's log."""

    def __init__(self, worker: _Worker, log_path: Path, launch: str) -> None:
        self.worker = worker
        self.log_path = log_path
        self.launch = launch  # the HYPERFLEET_LAUNCH tag of what the trial starts
        self.code: int | None = None
        self.starting = True  # the worker has not taken the trial yet (it is still starting)

    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        w = self.worker
        with contextlib.suppress(EOFError, OSError):
            while self.code is None and w.conn.poll():
                message = w.conn.recv()
                if message == STARTED:
                    self.starting = False
                else:
                    self.code = int(message)
        if self.code is None and not w.alive():
            w.proc.join()
            self.code = 128 + signal.SIGKILL if w.proc.exitcode is None else abs(w.proc.exitcode)
        if self.code is not None:
            w.busy = False
        return self.code

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.worker.proc.pid is not None:
                os.kill(self.worker.proc.pid, sig)

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        if self.poll() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        return self.kill()

    def kill(self) -> int:
        if self.poll() is None:
            self._signal(signal.SIGKILL)
            pid = self.worker.proc.pid
            with contextlib.suppress(OSError):  # its group (see .procs): unreaped, pid still its
                if pid is not None:
                    os.killpg(pid, signal.SIGKILL)
            self.worker.proc.join()
        kill_tagged(LAUNCH_VAR, self.launch)  # processes the trial started, if any
        return int(self.poll() or 0)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return read_tail(self.log_path, lines)


class InProcessLauncher:
    """Up to ``workers`` warm worker processes, one trial at a time each.

    ``prestart``: start them all now, so that their start-up (an interpreter, torch, the
    platform's clients) overlaps the controller's own instead of delaying the first trials.
    """

    def __init__(self, workers: int, prestart: bool = False) -> None:
        self.max_workers = workers
        self._workers: list[_Worker] = []
        self._starting: threading.Thread | None = None
        if prestart:
            self._starting = threading.Thread(
                target=self._start, args=(workers,), name="inprocess-prestart", daemon=True
            )
            self._starting.start()

    def _start(self, n: int) -> None:
        self._workers += [_Worker() for _ in range(n)]

    def _started(self, timeout: float | None = None) -> bool:
        """Whether the workers of ``prestart`` are started (waiting ``timeout`` for them)."""
        if self._starting is not None:
            self._starting.join(timeout)
            if self._starting.is_alive():
                return False
            self._starting = None
        return True

    def wait(self, timeout: float) -> None:
        """Return when a busy worker answers or ends, or after ``timeout`` seconds: the
        controller reaps a finished trial at once instead of at its next tick."""
        if not self._started(timeout):
            return
        busy = [w for w in self._workers if w.busy]
        if busy:
            ready = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
            mp.connection.wait(ready, timeout)
        else:
            time.sleep(timeout)

    def _idle_worker(self) -> _Worker:
        self._started()
        self._workers = [w for w in self._workers if w.alive()]
        for w in self._workers:
            if not w.busy:
                return w
        if len(self._workers) >= self.max_workers:
            raise RuntimeError("every in-process worker is busy")  # the pool's leases prevent it
        worker = _Worker()
        self._workers.append(worker)
        return worker

    def launch(
        self, spec: TrialSpec, lease: Lease | None = None, rendezvous: object = None
    ) -> InProcessHandle:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        tags = tag_launch(spec)
        worker = self._idle_worker()
        worker.busy = True
        worker.conn.send((str(spec.log_path), str(spec.path), tags))
        return InProcessHandle(worker, spec.log_path, tags[LAUNCH_VAR])

    def close(self) -> None:
        self._started()
        for w in self._workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                w.conn.send(None)
        deadline = time.monotonic() + 5
        for w in self._workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
        self._workers = []

    def __del__(self) -> None:  # pragma: no cover - a best effort when close was forgotten
        with contextlib.suppress(Exception):
            for w in self._workers:
                w.proc.kill()
