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

Workers come from multiprocessing's *fork server*, which imports the trial runtime (torch),
the recorder and what a trial's first optimizer imports (``torch._dynamo``) once: every
worker, the first ones and each replacement, is a fork of it (milliseconds) rather than an
interpreter importing torch again (seconds of CPU each, which the first trials of a sweep
wait for). The server never runs a trial and starts no thread, so
each fork starts clean; a worker takes the controller's environment and working directory as
they are when it starts (a fork would otherwise have the server's). ``prestart`` starts them
from a thread, so the controller goes on opening the sweep while the server imports.

**Without torch.** A workload that never uses torch (a scikit-learn model, a test function)
need not wait for it: the trial runtime imports torch only when a trial asks for it
(:mod:`hyperfleet.trials.distributed`), so for such a sweep the server imports the runtime and
the recorder only, and the workers import nothing ahead (:func:`needs_torch` decides: a
function shipped by value whose pickle never names torch, called from a program that has not
imported torch). A workload that imports torch after all imports it in each worker, once.

Both halves live here: the worker's loop (:func:`inprocess_worker`, which runs in the worker
process and runs each trial as :mod:`.trial_process` does) and the launcher's side that feeds
it (:class:`InProcessLauncher`, :class:`InProcessHandle`), so their messages are one module's.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

from hyperfleet import startup
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.launcher.base import (
    LOG_TAIL_LINES,
    STOP_GRACE_S,
    Launcher,
    TrialHandle,
    read_tail,
)
from hyperfleet.platform.launcher.procs import (
    LAUNCH_VAR,
    end_descendants,
    hold_descendants,
    kill_tagged,
    start_guard,
    tag_launch,
)
from hyperfleet.platform.launcher.torchrun import die_with_parent
from hyperfleet.platform.launcher.trial_process import (
    IMPORT_AHEAD_ENV,
    RECORDER_LAZY_IMPORTS,
    ahead_names,
    exit_now,
    exit_on_sigterm,
    import_ahead,
    preload,
    run_task,
)
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.wire import TrialSpec

_FORKS = mp.get_context("forkserver")


def _preload_in_server(torch: bool = True) -> None:
    """What the fork server imports before its first fork (set before it starts): the trial
    runtime, the recorder, and (``torch``) what workers would otherwise each import ahead on
    a thread of their own (:func:`~.trial_process.import_ahead`, ``torch._dynamo``: about a
    second of CPU per worker, which the first trials' first optimizers waited for) with torch
    itself; imported once here, every worker has it."""
    ahead = ["torch", *ahead_names()] if torch else []
    _FORKS.set_forkserver_preload(
        ["hyperfleet.platform.launcher.gc_paused", "hyperfleet.trials.runtime",
         "hyperfleet.platform.recorder", *RECORDER_LAZY_IMPORTS, *ahead]
    )  # fmt: skip


def needs_torch(cfg: SweepConfig) -> bool:
    """Whether ``cfg``'s workers import torch ahead: when the program running it has, or
    :func:`names_torch` says so of its workload."""
    return "torch" in sys.modules or names_torch(cfg.trial.code)


def names_torch(code: str | None) -> bool:
    """Whether a workload may use torch: one named by its import path (``code`` None) may; a
    function shipped by value when its pickle (``code``) names torch (a global, an import)."""
    if code is None:
        return True
    try:
        return b"torch" in base64.b64decode(code)
    except (binascii.Error, ValueError):  # validation refuses it; nothing to save here
        return True


# -- the worker: a process of its own, from the fork server ------------------------------


STARTED = "started"  # an in-process worker took a trial (its start-up is behind it)


def _leave_fork_server() -> None:
    """Close this worker's copy of the fork server's lifeline. multiprocessing hands every
    child the write end of the pipe whose end tells the server that its client (the
    controller) is gone; while any worker holds a copy the server outlives a killed
    controller, and so would the workers, whose parent-death signal comes from the server's
    end. (A private attribute of ``multiprocessing.forkserver``: if it ever moves, the test
    of workers dying with a killed controller fails.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def inprocess_worker(conn: Connection, controller: int, place: tuple[dict[str, str], str]) -> None:
    """An in-process trial worker: runs the ``(log path, spec path, tags)`` tasks it receives,
    one at a time, answering each with its exit code; ends on ``None``, a closed pipe, SIGTERM
    (the trial it runs unwinds first) or the death of its parent (the fork server, which ends
    with the controller). ``place``: the controller's environment and working directory.
    Every process a trial starts ends with the trial, and with the worker (its guard kills
    the worker's group): see :mod:`.procs`."""
    die_with_parent()
    _leave_fork_server()
    try:
        os.kill(controller, 0)
    except ProcessLookupError:  # the controller died before the line above took effect
        return
    hold_descendants()
    guard = start_guard()
    try:
        _serve_trials(conn, place, guard)
    finally:  # stopped: the trial unwound; what it started ends here, before the worker
        end_descendants({guard})
    exit_now(0)  # every trial is recorded: no interpreter teardown to wait for


def _serve_trials(conn: Connection, place: tuple[dict[str, str], str], guard: int) -> None:
    """The loop of :func:`inprocess_worker`, from setting up its process to its last task;
    ``guard``: the pid of its group's guard, spared when a trial's processes end."""
    environ, cwd = place
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller decides what an interrupt stops
    exit_on_sigterm()
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # in-process trials hold no device
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)
    preload()
    startup.resume()  # the fork server imported with the collector off (launcher.gc_paused)
    import_ahead()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            break
        if task is None:
            break
        log, spec, tags = task
        conn.send(STARTED)  # the trial's own time (trial.timeout) begins now
        code = run_task(log, spec, tags=tags)
        end_descendants({guard})  # what the trial started ends with it
        conn.send(code)


# -- the launcher's side ---------------------------------------------------------------------


_MAIN_FILE = threading.Lock()  # one worker at a time hides and restores __main__.__file__


@contextlib.contextmanager
def _main_file_if_real() -> Iterator[None]:
    """Inside the block, ``__main__`` names its file only if it is a file.

    multiprocessing starts each worker by running the script's file again (as ``__mp_main__``,
    so that what ``__main__`` defines unpickles there); a program with no file of its own, given
    on standard input (``python -``, whose ``__file__`` is ``<stdin>``) or whose file is gone,
    would make every worker fail to start looking for it. Its workers start without it: a
    trial needs nothing of ``__main__`` but its workload, which travels by value
    (:mod:`hyperfleet.platform.sweeps.shipping`). ``python -c`` and a notebook kernel's
    ``__main__`` have no ``__file__`` at all and need nothing hidden."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    if main is None or path is None or spec is not None or os.path.isfile(str(path)):
        yield
        return
    with _MAIN_FILE:
        del main.__file__
        try:
            yield
        finally:
            main.__file__ = path


class _Worker:
    def __init__(self, threads: int, torch: bool = True) -> None:
        self.conn, child = _FORKS.Pipe()
        environ = {**os.environ, **thread_cap(threads)}
        if not torch:  # nothing imported ahead (module docstring), unless the user names it
            environ.setdefault(IMPORT_AHEAD_ENV, "")
        place = (environ, os.getcwd())
        args = (child, os.getpid(), place)
        self.proc = _FORKS.Process(target=inprocess_worker, args=args, daemon=True)
        with _main_file_if_real():
            self.proc.start()
        child.close()
        self.busy = False

    def alive(self) -> bool:
        return self.proc.is_alive()


class InProcessHandle(TrialHandle):
    """One in-process trial: the worker running it and the trial's log."""

    def __init__(self, worker: _Worker, log_path: Path, launch: str) -> None:
        self.worker = worker
        self.log_path: Path = log_path
        self.launch = launch  # the HYPERFLEET_LAUNCH tag of what the trial starts
        self.code: int | None = None
        self._starting = True  # the worker has not taken the trial yet (it is still starting)

    @property
    def starting(self) -> bool:
        return self._starting

    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        w = self.worker
        with contextlib.suppress(EOFError, OSError):
            while self.code is None and w.conn.poll():
                message = w.conn.recv()
                if message == STARTED:
                    self._starting = False
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


def thread_cap(threads: int) -> dict[str, str]:
    """The environment that caps a worker's torch (OpenMP, MKL) at ``threads`` intra-op
    threads (at least 1), as a CPU lease's environment caps a torchrun rank's; the trial
    runtime applies it (``torch.set_num_threads``)."""
    n = str(max(1, threads))
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


class InProcessLauncher(Launcher):
    """Up to ``workers`` warm worker processes, one trial at a time each.

    ``threads``: each worker's intra-op threads, a CPU slot's share as a torchrun trial's rank
    gets (the pool's ``threads_per_process``). Without a cap each worker's torch takes every
    core, and two trials on two cores run four OpenMP threads that spin while they wait for
    each other: a small model's step then costs many times its single-thread time.
    ``prestart``: start them all now, so that their start-up (an interpreter, torch, the
    platform's clients) overlaps the controller's own instead of delaying the first trials.
    ``torch``: the server and the workers import torch ahead (:func:`needs_torch`).
    """

    def __init__(
        self, workers: int, prestart: bool = False, threads: int = 1, torch: bool = True
    ) -> None:
        _preload_in_server(torch)  # before the server starts (a later call changes nothing)
        self.max_workers = workers
        self.threads = threads
        self.torch = torch
        self._workers: list[_Worker] = []
        self._starting: threading.Thread | None = None
        if prestart:
            self._starting = threading.Thread(
                target=self._start, args=(workers,), name="inprocess-prestart", daemon=True
            )
            self._starting.start()

    def _start(self, n: int) -> None:
        self._workers += [_Worker(self.threads, self.torch) for _ in range(n)]

    def _started(self, timeout: float | None = None) -> bool:
        """Whether the workers of ``prestart`` are started (waiting ``timeout`` for them)."""
        if self._starting is not None:
            self._starting.join(timeout)
            if self._starting.is_alive():
                return False
            self._starting = None
        return True

    def wait(self, timeout: float) -> bool:
        """Return when a busy worker answers or ends, or after ``timeout`` seconds: the
        controller reaps a finished trial at once instead of at its next tick."""
        if not self._started(timeout):
            return True
        busy = [w for w in self._workers if w.busy]
        if busy:
            ready = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
            mp.connection.wait(ready, timeout)
        else:
            time.sleep(timeout)
        return True

    def _idle_worker(self) -> _Worker:
        self._started()
        self._workers = [w for w in self._workers if w.alive()]
        for w in self._workers:
            if not w.busy:
                return w
        if len(self._workers) >= self.max_workers:
            raise RuntimeError("every in-process worker is busy")  # the pool's leases prevent it
        worker = _Worker(self.threads, self.torch)
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
