"""One trial run in the current process: what every trial process does, however started.

A trial's processes — the ranks of a torchrun trial, a warm rank, a fork server's child, an
in-process worker — all read the :class:`~hyperfleet.spec.wire.TrialSpec` the controller
wrote and run the trial runtime (:func:`hyperfleet.trials.runtime.run_trial`) with rank 0's
recorder: the platform's :class:`~hyperfleet.platform.recorder.RankZeroRecorder` when the spec
names a storage, the runtime's printing recorder otherwise (``hyperfleet train``). The entry
points that call these functions are :mod:`hyperfleet.platform.trial_entry` (started with
``-m``) and the in-process worker (:mod:`.inprocess`).

The trial side (and so torch) is imported inside these functions only: importing this module
stays cheap, so the controller can import the launchers that use it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hyperfleet.platform.launcher.procs import running_here
from hyperfleet.spec.recorder import Recorder
from hyperfleet.spec.wire import TrialSpec


def recorder_for(spec: TrialSpec) -> Recorder:
    """Rank 0's recorder for ``spec``: storage, scheduler and MLflow, or printed reports."""
    if spec.storage is None:
        from hyperfleet.trials.runtime import PrintRecorder

        return PrintRecorder(spec)
    from hyperfleet.platform.recorder import RankZeroRecorder

    return RankZeroRecorder(spec)


def run_spec_file(
    path: str | Path, install_signals: bool = False, keep_process_group: bool = False
) -> str:
    """Run the trial of the spec file at ``path``; returns its outcome. While it runs, this
    process announces it in the trial's directory (:func:`~.procs.running_here`)."""
    from hyperfleet.trials.runtime import run_trial

    spec = TrialSpec.read(path)
    with running_here(spec.trial_dir):
        return run_trial(
            spec, recorder_for, install_signals=install_signals,
            keep_process_group=keep_process_group,
        )  # fmt: skip


@contextlib.contextmanager
def output_to(log_path: str) -> Iterator[None]:
    """This process's stdout and stderr (the file descriptors: native code's output too)
    appended to ``log_path`` inside the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_task(
    log_path: str, spec_path: str, warm: Any = None, tags: dict[str, str] | None = None
) -> int:
    """One trial in this worker, its stdout and stderr in ``log_path``; its exit code.
    ``warm``: a warm rank's :class:`~hyperfleet.trials.baseline.Baseline`, put back first;
    ``tags``: put in the environment of whatever the trial starts (:mod:`.procs`)."""
    os.environ.update(tags or {})
    with output_to(log_path):
        try:
            if warm is not None:
                warm.restore()
            run_spec_file(spec_path, keep_process_group=warm is not None)
            return 0
        except SystemExit:  # stopped (SIGTERM): the worker ends with the trial
            raise
        except BaseException:  # noqa: BLE001 - the trial failed; the worker lives on
            with contextlib.suppress(OSError):  # a full disk takes no traceback either
                traceback.print_exc()
            return 1


def exit_on_sigterm() -> None:
    """SIGTERM unwinds the trial this process runs (the runtime's handler), and then the
    process ends with it."""
    from hyperfleet.trials.runtime import exit_on_sigterm as install

    install()


#: what the recorder imports only when it first opens the trial's Optuna storage (Optuna checks
#: the schema's revision with alembic): imported ahead, a forked trial does not pay it each time
RECORDER_LAZY_IMPORTS = ("alembic.migration",)


def preload(recorder: bool = True) -> None:
    """Import what a trial will need while this process has nothing else to do (a worker or
    rank waiting for its first task): the trial runtime (torch), and for the process that
    records (rank 0) the recorder's storage and schedulers. Not MLflow: a trial's sink imports
    it when it first ships, which a short trial never does
    (:mod:`hyperfleet.platform.tracking.sink`)."""
    import hyperfleet.trials.runtime

    if recorder:
        import hyperfleet.platform.recorder  # noqa: F401

        for name in RECORDER_LAZY_IMPORTS:
            importlib.import_module(name)


#: the environment variable naming what :func:`import_ahead` imports (comma-separated module
#: names; empty: nothing)
IMPORT_AHEAD_ENV = "HYPERFLEET_IMPORT_AHEAD"
#: what a trial's first torch optimizer imports (``torch.optim`` wraps its methods in
#: ``torch._disable_dynamo``, which imports ``torch._dynamo`` and sympy: about 1.5 s of CPU)
IMPORT_AHEAD = ("torch._dynamo",)


def ahead_names() -> tuple[str, ...]:
    """What :func:`import_ahead` imports: :data:`IMPORT_AHEAD`, or ``$HYPERFLEET_IMPORT_AHEAD``'s
    modules."""
    raw = os.environ.get(IMPORT_AHEAD_ENV)
    return IMPORT_AHEAD if raw is None else tuple(n.strip() for n in raw.split(",") if n.strip())


def import_ahead() -> threading.Thread | None:
    """Import :data:`IMPORT_AHEAD` (or ``$HYPERFLEET_IMPORT_AHEAD``'s modules) on a daemon
    thread, so a worker or rank waiting for its first task has it when the trial's first
    optimizer asks, instead of paying it then; a trial that asks earlier waits for the same
    import (Python's module lock), no longer. A fork of this process waits for every such
    thread first (:func:`_join_ahead`, registered once with ``os.register_at_fork``): a child
    must not inherit a module lock held by a thread that does not exist in it. Returns the
    thread (None when there is nothing to import)."""
    names = ahead_names()
    if not names:
        return None
    thread = threading.Thread(
        target=_import_quietly, args=(names,), name="hyperfleet-import-ahead", daemon=True
    )
    thread.start()
    _AHEAD_THREADS.append(thread)
    return thread


_AHEAD_THREADS: list[threading.Thread] = []  # started by import_ahead in this process


def _join_ahead() -> None:
    """Before a fork: wait for the imports :func:`import_ahead` started (in a forked child the
    parent's threads are not alive, and joining them returns at once)."""
    for thread in _AHEAD_THREADS:
        thread.join()


os.register_at_fork(before=_join_ahead)


def _import_quietly(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            logging.getLogger(__name__).debug("importing %s ahead failed", name, exc_info=True)


def exit_now(code: int) -> None:
    """End a trial process whose work is recorded without the interpreter's teardown: torch's
    RPC (TensorPipe) threads can abort the process while native objects are destroyed at exit
    ("terminate called without an active exception"), turning a finished trial into a failed
    one. Everything the trial owns (stores, MLflow, process groups) is closed by now."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
