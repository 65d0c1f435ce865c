"""Start a trial's processes with PyTorch's elastic launcher (``torch.distributed.run``).

One launch is one trial: torchrun's agent (``torch.distributed.run``'s ``main``, started by
``python -m hyperfleet.platform.trial_entry --agent ARGS``, which is ``python -m
torch.distributed.run ARGS`` with hyperfleet's start-up: :func:`.trial_entry.agent`) on this
host with ``nproc_per_node`` = the lease's device count, a c10d rendezvous on a free loopback
port of its own, and ``hyperfleet.platform.trial_entry`` as the script. The launcher's agent
starts, monitors and tears down the workers; hyperfleet only owns the agent process:

* it runs in a new session (its own process group), so ``stop`` reaches the agent, which stops
  its workers; what is left after the grace period is killed, the workers included wherever
  they went (each rank has a session of its own; see :mod:`.procs`), so no trial process
  outlives the sweep, whatever signals it ignores;
* Linux's parent-death signal is set on the agent, so even a controller killed with SIGKILL
  takes its trials down;
* an older copy of the same trial still alive on this host (left by a controller that died)
  is ended before the trial is launched again;
* stdout and stderr of every rank go to the trial's own log file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from hyperfleet.errors import LaunchError
from hyperfleet.platform.launcher.base import (
    LOG_TAIL_LINES,
    STOP_GRACE_S,
    Launcher,
    Rendezvous,
    TrialHandle,
    read_tail,
)
from hyperfleet.platform.launcher.procs import LAUNCH_VAR, kill_tagged, tag_launch
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec

ENTRY = "hyperfleet.platform.trial_entry"  # every trial process's module (agent and ranks)
_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class TorchrunHandle(TrialHandle):
    """A running trial: its torchrun agent process (a session of its own) and log."""

    def __init__(
        self, proc: subprocess.Popen[bytes], log: IO[bytes], log_path: Path, launch: str
    ) -> None:
        self.proc = proc
        self.log_path: Path = log_path
        self.launch = launch  # the HYPERFLEET_LAUNCH tag of every process of this launch
        self._log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and not self._log.closed:
            self._log.close()
            kill_tagged(LAUNCH_VAR, self.launch)  # a rank its agent left behind
        return code

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """SIGTERM the whole trial, SIGKILL what is left after ``grace`` seconds."""
        if self.poll() is None:
            self._signal_group(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.kill()

    def kill(self) -> int:
        self._signal_group(signal.SIGKILL)
        kill_tagged(LAUNCH_VAR, self.launch)  # ranks in sessions of their own, wherever they are
        code = self.proc.wait()
        self.poll()
        return code

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return read_tail(self.log_path, lines)


def rendezvous_args(rdzv_id: str, rendezvous: Rendezvous | None = None) -> list[str]:
    """torchrun's rendezvous and restart options: a c10d rendezvous on a free loopback port of
    this host's own, or this host's node of a trial that spans hosts (``rendezvous``).

    No restart, except for a trial whose nodes are a range (``min_nodes``): its agents meet as
    ``--nnodes min:max`` and may restart their ranks once per node it may lose, so that after
    a node is lost the agents left meet again (torchrun's elastic rendezvous: a membership
    change, the lost node's absence once its last call is over) and their ranks continue from
    the trial's checkpoint at the smaller size."""
    restarts = 0
    if rendezvous is None:
        nodes, endpoint, conf = "1", f"127.0.0.1:{free_port()}", []
    else:
        endpoint, rdzv_id = rendezvous.endpoint, rendezvous.rdzv_id
        nodes, low = str(rendezvous.nodes), rendezvous.min_nodes
        if low is not None and low < rendezvous.nodes:
            nodes, restarts = f"{low}:{rendezvous.nodes}", rendezvous.nodes - low
        is_host = "true" if rendezvous.is_host else "false"
        conf = [
            f"--rdzv-conf=is_host={is_host},join_timeout={max(1, int(rendezvous.join_timeout))}"
        ]
    return [
        f"--nnodes={nodes}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        *conf,
        f"--max-restarts={restarts}",
    ]


def torchrun_command(
    spec_path: Path, nproc: int, rdzv_id: str, rendezvous: Rendezvous | None = None
) -> list[str]:
    """The torchrun command line of one trial on this host: a rendezvous on a free loopback
    port of its own, or this host's node of a trial that spans hosts."""
    return [
        sys.executable,
        "-m",
        ENTRY,
        "--agent",  # torchrun itself: trial_entry.agent
        f"--nproc-per-node={nproc}",
        *rendezvous_args(rdzv_id, rendezvous),
        "--monitor-interval=0.2",
        "-m",
        ENTRY,
        str(spec_path),
    ]


def trial_env(lease: Lease, threads_per_process: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(lease.env(threads_per_process))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn(
    cmd: list[str], env: dict[str, str], spec: TrialSpec, what: str, announce: bool = False
) -> TorchrunHandle:
    """Start ``cmd`` in a session of its own, its output appended to the trial's log (after a
    ``# hyperfleet launch:`` line if ``announce``), dying with this process; ``LaunchError``
    naming ``what`` if it cannot start."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    log = spec.log_path.open("ab")
    if announce:
        log.write(f"# hyperfleet launch: {' '.join(cmd)}\n".encode())
        log.flush()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    except OSError as exc:
        log.close()
        raise LaunchError(f"cannot start {what}: {exc}") from None
    return TorchrunHandle(proc, log, spec.log_path, env[LAUNCH_VAR])


def unresolved(host: str) -> str | None:
    """Why ``host`` cannot be looked up (the resolver's reason), or None when it resolves."""
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as exc:
        return str(getattr(exc, "strerror", None) or exc)
    return None


def rendezvous_problem(ranks: int, address: str | None) -> str | None:
    """A process group of ``ranks`` on this host cannot meet: torchrun's agent hands its
    ranks this host's name as the master address (and a trial that spans hosts is met at
    ``address``, else that name), which every rank would look up again forever."""
    if ranks < 2 and address is None:
        return None
    for host, what in ((socket.gethostname(), "this host's name"), (address, "the address")):
        if host is None:
            continue
        reason = unresolved(host)
        if reason is not None:
            return (
                f"rendezvous: {what} {host!r} does not resolve ({reason}); the trial's "
                f"processes could not meet. Fix the host's name resolution (/etc/hosts, DNS) "
                f"or the worker's --advertise-address"
            )
    return None


class TorchrunLauncher(Launcher):
    """One torchrun process group per trial, on this host's leased devices."""

    def __init__(self, threads_per_process: int = 1) -> None:
        self.threads_per_process = threads_per_process

    def launch_problem(self, trial: TrialConfig, ranks: int, address: str | None) -> str | None:
        return rendezvous_problem(ranks, address)

    def launch(
        self, spec: TrialSpec, lease: Lease, rendezvous: Rendezvous | None = None
    ) -> TorchrunHandle:
        """Start the trial's processes on ``lease``'s devices; returns at once."""
        rdzv_id = f"{spec.sweep}-{spec.number}-{int(time.time() * 1000)}"
        cmd = torchrun_command(spec.path, len(lease.devices), rdzv_id, rendezvous)
        env = trial_env(lease, self.threads_per_process)
        env.update(tag_launch(spec, rendezvous.rdzv_id if rendezvous else None))
        return spawn(cmd, env, spec, f"torchrun for {rdzv_id}", announce=True)

    def close(self) -> None:
        pass
