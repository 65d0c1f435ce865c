"""A script trial's program: its command line and environment, its output, its stop.

:class:`Program` starts the user's program in a session of its own, copies every line of its
stdout and stderr to the trial's log (the runner's output) and hands rank 0's stdout lines to
the runner (:mod:`.runner`); it stops the program and, once its main process exited, ends
whatever it left running. :func:`program_argv` and :func:`program_env` give its command line
and environment; :func:`mlflow_run` and :func:`local_run` the MLflow run it logs into.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from hyperfleet.platform.config.command import (
    PREFIX_TEMPLATE,
    PREFIX_VAR,
    RANK0_PREFIX,
    SPEC_VAR,
    render,
    under_torchrun,
)
from hyperfleet.platform.launcher.base import Rendezvous
from hyperfleet.platform.launcher.procs import LAUNCH_VAR, end_descendants, kill_tagged
from hyperfleet.platform.launcher.script.readers import MAX_LINE, split_output
from hyperfleet.platform.launcher.torchrun import die_with_parent, rendezvous_args
from hyperfleet.platform.tracking.spool import Spool, is_pending
from hyperfleet.platform.urls import TRACKING_FILE
from hyperfleet.spec.wire import TrialSpec

PRUNE_GRACE_S = 1.0  # SIGTERM to SIGKILL when a report stops the program
STDERR_LINES = 20  # the program's last stderr lines a failure quotes
STDERR_KEPT = 400  # its last stderr lines kept to find its exception in (torchrun's table below)
DRAIN_S = 2.0  # its output is read this long after the program's main process exited
CHUNK = 64 * 1024  # bytes read from the program's output at a time
RUN_WAIT_S = 20.0  # how long the program's start waits for its trial's MLflow run
LOCAL_STORE = f"program-{TRACKING_FILE}"  # in the trial directory: its run while MLflow is away


class Program:
    """The user's program: started, its output copied to the log line by line, stopped."""

    def __init__(self, argv: list[str], env: dict[str, str], rank0_prefix: str | None) -> None:
        self.argv = argv
        self.prefix = rank0_prefix
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
        self._write = threading.Lock()
        self._exited_at: float | None = None  # when settle() first saw the program exited
        self._rest_ended = False
        print(f"# hyperfleet script: {' '.join(argv)}", flush=True)
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._threads = [
            threading.Thread(target=self._copy, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._copy, args=(self.proc.stderr, False), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _copy(self, stream: IO[bytes], is_stdout: bool) -> None:
        out = sys.stdout.buffer
        chunks = iter(functools.partial(os.read, stream.fileno(), CHUNK), b"")
        for raw, end, cut in split_output(chunks):
            with self._write:
                out.write(raw + end)
                if cut:
                    out.write(
                        f"\nhyperfleet: the line above was longer than {MAX_LINE // 1024} "
                        f"KiB; its last {cut} bytes were dropped and it is read as no "
                        f"report\n".encode()
                    )
                out.flush()
            line = raw.decode(errors="replace")
            if not is_stdout:
                self.stderr.append(line[:1000])
            elif cut or not line:
                continue
            elif self.prefix is None:
                self.lines.put(line)
            elif line.startswith(self.prefix):
                self.lines.put(line[len(self.prefix) :])
        if is_stdout:
            self.lines.put(None)  # end of output

    def settle(self) -> None:
        """Once the program's main process has exited: after :data:`DRAIN_S` of its output,
        end what it left running (whose ends of its pipes then close)."""
        if self._rest_ended or self.proc.poll() is None:
            return
        if self._exited_at is None:
            self._exited_at = time.monotonic()
        elif time.monotonic() - self._exited_at >= DRAIN_S:
            self.end_rest()

    def end_rest(self) -> None:
        """End every process the program left: its group, its launch's tagged processes and
        every descendant of this runner (their subreaper). Call it once the program exited."""
        self._rest_ended = True
        self._signal(signal.SIGKILL)
        left = end_descendants(set())
        if left:
            print(
                f"hyperfleet: the program exited leaving {len(left)} process(es) running; "
                f"ended them",
                flush=True,
            )

    def finish_output(self, timeout: float = 5.0) -> None:
        """Read the output of the program that exited for up to :data:`DRAIN_S`, end what it
        left, then read the rest."""
        deadline = time.monotonic() + DRAIN_S
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0))
        self.end_rest()
        for t in self._threads:
            t.join(timeout)

    def stop(self, grace: float = PRUNE_GRACE_S) -> float:
        """SIGTERM every process of the program, SIGKILL what is left after ``grace``;
        returns the seconds it took."""
        start = time.monotonic()
        self._signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        self._signal(signal.SIGKILL)
        self.proc.wait()
        return time.monotonic() - start

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        launch = os.environ.get(LAUNCH_VAR)
        if launch:  # torchrun's ranks in sessions of their own (never this runner)
            kill_tagged(LAUNCH_VAR, launch, sig)


def mlflow_run(spec: TrialSpec, wait_s: float = RUN_WAIT_S) -> str | None:
    """The id of the trial's MLflow run. A trial launches before its run exists (``pending:N``,
    :mod:`~hyperfleet.platform.tracking.tracker`); the controller writes the id to the
    trial's spool folder once it is created: waited for up to ``wait_s`` seconds (None then,
    or when the sweep has no MLflow)."""
    if not spec.run_id or not spec.tracking_uri:
        return None
    if not is_pending(spec.run_id):
        return spec.run_id
    spool = Spool(Path(spec.trial_dir) / "mlflow")
    deadline = time.monotonic() + wait_s
    while True:
        found = spool.run_id()
        if found is not None and not is_pending(found):
            return found
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def local_run(spec: TrialSpec) -> tuple[str, str]:
    """A run of the program's own in a store in the trial's directory (``program-mlflow.db``,
    its artifacts beside it): where its MLflow calls go when the trial's run could not be
    created (MLflow unreachable at its start). Its URI and id."""
    from hyperfleet.platform.tracking.client import open_client

    directory = Path(spec.trial_dir)
    uri = f"sqlite:///{directory / LOCAL_STORE}"
    client = open_client(uri)
    name = f"trial-{spec.number}"
    found = client.get_experiment_by_name(name)
    experiment = (
        found.experiment_id
        if found is not None
        else client.create_experiment(name, (directory / "program-artifacts").as_uri())
    )
    run = client.create_run(experiment, run_name=name, tags={"hyperfleet.trial": name})
    return uri, str(run.info.run_id)


def program_env(
    spec: TrialSpec, run_id: str | None, experiment_id: str | None, uri: str | None = None
) -> dict[str, str]:
    """The program's environment: the runner's, the trial's MLflow run (in the store at
    ``uri``, default the sweep's), the spec's path."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # a Python program's prints reach the pipe line by line
    env[SPEC_VAR] = str(spec.path)
    env[PREFIX_VAR] = PREFIX_TEMPLATE  # under torchrun: each line tells its global rank
    if spec.tracking_uri and run_id:
        env["MLFLOW_TRACKING_URI"] = uri or spec.tracking_uri
        env["MLFLOW_RUN_ID"] = run_id
        if experiment_id:
            env["MLFLOW_EXPERIMENT_ID"] = experiment_id
    return env


def program_argv(
    spec: TrialSpec, rendezvous: Rendezvous | None = None
) -> tuple[list[str], str | None]:
    """The command line of the trial's program on this host (``rendezvous``: this host's node
    of a trial that spans hosts), and the prefix of rank 0's output lines."""
    assert spec.trial.command is not None
    fields = {"steps": spec.trial.length, "eval_every": spec.trial.eval_every}
    argv = render(spec.trial.command, spec.params, spec.trial_dir, fields)
    resources = spec.trial.resources
    nproc = resources.devices // resources.nodes
    if nproc <= 1 and rendezvous is None:
        return argv, None
    log_dir = Path(spec.trial_dir) / "torchrun"
    log_dir.mkdir(parents=True, exist_ok=True)
    rdzv = rendezvous_args(f"{spec.sweep}-{spec.number}", rendezvous)
    return under_torchrun(argv, max(1, nproc), rdzv, log_dir), RANK0_PREFIX
