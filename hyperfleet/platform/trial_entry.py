"""Entry points of trial processes: the one place the control plane reaches the trial side.

* ``... -m hyperfleet.platform.trial_entry --agent ARGS`` — torchrun's agent (:func:`agent`);
* ``torchrun ... -m hyperfleet.platform.trial_entry SPEC`` — every rank of a torchrun trial;
* ``... -m hyperfleet.platform.trial_entry --warm SOCKET`` — every rank of a warm group
  (:mod:`hyperfleet.platform.launcher.warm`): :func:`warm_rank` runs the trials the launcher
  hands it, one after another, in the same processes and process group;
* ``... --fork-server SOCKET`` — :func:`fork_server`, a one-device CPU group for
  ``trial.reuse: false``: a fresh forked child per trial;
* :func:`inprocess_worker` — the loop of an in-process trial worker
  (:mod:`hyperfleet.platform.launcher.inprocess`), one trial spec after another.

Both read the :class:`~hyperfleet.spec.wire.TrialSpec` the controller wrote and run the trial
runtime (:func:`hyperfleet.trials.runtime.run_trial`) with rank 0's recorder: the platform's
:class:`~hyperfleet.platform.recorder.RankZeroRecorder` when the spec names a storage, the
runtime's printing recorder otherwise (``hyperfleet train``).

The trial side (and so torch) is imported inside these functions only: importing this module
stays cheap, so the launcher can hand :func:`inprocess_worker` to a new process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hyperfleet import startup
from hyperfleet.platform.launcher.procs import (
    end_descendants,
    hold_descendants,
    running_here,
    start_guard,
)
from hyperfleet.platform.launcher.torchrun import die_with_parent
from hyperfleet.spec.wire import TrialSpec


def recorder_for(spec: TrialSpec) -> Any:
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
    process announces it in the trial's directory (:func:`~.launcher.procs.running_here`)."""
    from hyperfleet.trials.runtime import run_trial

    spec = TrialSpec.read(path)
    with running_here(spec.trial_dir):
        return run_trial(
            spec, recorder_for, install_signals=install_signals,
            keep_process_group=keep_process_group,
        )  # fmt: skip


@contextlib.contextmanager
def _output_to(log_path: str) -> Iterator[None]:
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


def _redirected(
    log_path: str, spec_path: str, warm: Any = None, tags: dict[str, str] | None = None
) -> int:
    """One trial in this worker, its stdout and stderr in ``log_path``; its exit code.
    ``warm``: a warm rank's :class:`~hyperfleet.trials.baseline.Baseline`, put back first;
    ``tags``: put in the environment of whatever the trial starts (:mod:`.launcher.procs`)."""
    os.environ.update(tags or {})
    with _output_to(log_path):
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


def warm_rank(socket_path: str) -> int:
    """A rank of a warm group: join the process group once, then run each trial the launcher
    sends, answering with its exit code; leaves on end of file (exit 0), after a failed trial
    (its code: torchrun's agent then ends the other ranks), or on SIGTERM (the trial unwinds)."""
    from hyperfleet.platform.launcher.channel import RankChannel
    from hyperfleet.trials import distributed
    from hyperfleet.trials.baseline import Baseline
    from hyperfleet.trials.runtime import exit_on_sigterm

    exit_on_sigterm()
    env = distributed.init()
    preload(recorder=env.is_main)
    baseline = Baseline.capture()
    startup.resume()
    channel = RankChannel(socket_path, env.rank)
    try:
        while (task := channel.receive()) is not None:
            code = _redirected(task["log"], task["spec"], warm=baseline)
            channel.send({"task": task["task"], "code": code})
            if code != 0:
                return code
        return 0
    finally:
        channel.close()
        distributed.teardown()


def preload(recorder: bool = True) -> None:
    """Import what a trial will need while this process has nothing else to do (a worker or
    rank waiting for its first task): the trial runtime (torch), and for the process that
    records (rank 0) the recorder's storage and schedulers. Not MLflow: a trial's sink imports
    it when it first ships, which a short trial never does (:mod:`.tracking.sink`)."""
    import hyperfleet.trials.runtime

    if recorder:
        import hyperfleet.platform.recorder  # noqa: F401


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
    the worker's group): see :mod:`.launcher.procs`."""
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
    _exit_now(0)  # every trial is recorded: no interpreter teardown to wait for


def _serve_trials(conn: Connection, place: tuple[dict[str, str], str], guard: int) -> None:
    """The loop of :func:`inprocess_worker`, from setting up its process to its last task;
    ``guard``: the pid of its group's guard, spared when a trial's processes end."""
    environ, cwd = place
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller decides what an interrupt stops
    from hyperfleet.trials.runtime import exit_on_sigterm

    exit_on_sigterm()
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # in-process trials hold no device
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)
    preload()
    startup.resume()  # the fork server imported with the collector off (launcher.gc_paused)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            break
        if task is None:
            break
        log, spec, tags = task
        conn.send(STARTED)  # the trial's own time (trial.timeout) begins now
        code = _redirected(log, spec, tags=tags)
        end_descendants({guard})  # what the trial started ends with it
        conn.send(code)


def _fork_trial(task: dict[str, Any], channel: Any) -> int:
    """Run ``task`` in a child forked from this process (which never ran a trial itself) and
    return its exit code; the child is a fresh process that skipped the start-up."""
    pid = os.fork()
    if pid == 0:  # the child: its own seeds, then the trial; never returns
        code = 1
        try:
            startup.resume()  # the server stays paused: it only forks
            die_with_parent()
            channel.close()  # the parent's end stays open in the parent
            from hyperfleet.trials.baseline import fresh_seeds

            fresh_seeds()
            code = _redirected(task["log"], task["spec"])
        except SystemExit as exc:  # stopped: SIGTERM reached the child too
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            _exit_now(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def fork_server(socket_path: str) -> int:
    """A one-device CPU group for ``trial.reuse: false``: imports what a trial needs once,
    then forks a fresh child per trial (the fork costs milliseconds; the start-up it skips,
    seconds). The parent never imports a workload or runs a trial, and starts no thread
    (a fork copies only the calling thread), so every child starts as clean as a new
    process; the child seeds its generators from fresh entropy, as a new process does."""
    from hyperfleet.platform.launcher.channel import RankChannel
    from hyperfleet.trials.runtime import exit_on_sigterm

    exit_on_sigterm()
    preload()
    channel = RankChannel(socket_path, 0)
    try:
        while (task := channel.receive()) is not None:
            code = _fork_trial(task, channel)
            channel.send({"task": task["task"], "code": code})
        return 0
    finally:
        channel.close()


def main(argv: list[str] | None = None) -> int:
    startup.pause()  # until the trial side is imported (resumed by each kind of process)
    args = sys.argv[1:] if argv is None else argv
    if args[0] == "--agent":
        return agent(args[1:])
    if args[0] == "--warm":
        return warm_rank(args[1])
    if args[0] == "--fork-server":
        return fork_server(args[1])
    from torch.distributed.elastic.multiprocessing.errors import record

    announce_node()
    preload(recorder=False)  # torch; rank 0's recorder (none for ``hyperfleet train``) comes later
    startup.resume()
    record(run_spec_file)(Path(args[0]), install_signals=True)
    return 0


def agent(argv: list[str]) -> int:
    """torchrun's agent: ``torch.distributed.run``'s ``main`` on ``argv``, as ``python -m
    torch.distributed.run ARGV`` runs it, started as hyperfleet's other processes start (the
    collector held off while torch is imported) and ended without the interpreter's teardown
    (~0.5 s of CPU with torch loaded): its start and end cost about two thirds of the CPU
    they did (BENCHMARKS.md). Its exit code is torchrun's: 0; 1 with the traceback (a rank
    failed, or the agent was stopped by a signal); 2 for arguments it refused."""
    from torch.distributed.run import main as torchrun

    startup.resume()
    try:
        torchrun(argv)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def announce_node() -> None:
    """Local rank 0 of each torchrun agent says which ranks its node holds, so a trial's log
    shows how its world spans hosts (e.g. ``node 2 of 2: ranks 2-3 of world size 4``)."""
    env = os.environ
    if env.get("LOCAL_RANK") != "0" or "WORLD_SIZE" not in env:
        return
    world, local, rank = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"]), int(env["RANK"])
    node, nodes = int(env.get("GROUP_RANK", "0")), max(1, world // max(local, 1))
    print(
        f"node {node + 1} of {nodes}: ranks {rank}-{rank + local - 1} of world size {world}",
        flush=True,
    )


def _exit_now(code: int) -> None:
    """End a trial process whose work is recorded without the interpreter's teardown: torch's
    RPC (TensorPipe) threads can abort the process while native objects are destroyed at exit
    ("terminate called without an active exception"), turning a finished trial into a failed
    one. Everything the trial owns (stores, MLflow, process groups) is closed by now."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
