"""One warm group: a torchrun agent and its ranks (or a single process, or a fork server)
kept between trials, its channel to the ranks, its log, and the trial it runs now.

How groups are used, reused and torn down is the launcher's (:mod:`.warm`); this module
starts a group, hands it one task at a time and reads its ranks' answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from hyperfleet.errors import LaunchError
from hyperfleet.platform.launcher.channel import GroupChannel
from hyperfleet.platform.launcher.procs import LAUNCH_VAR, kill_tagged
from hyperfleet.platform.launcher.torchrun import (
    ENTRY,
    die_with_parent,
    torchrun_command,
    trial_env,
)
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.wire import TrialSpec


@dataclass(frozen=True)
class GroupKey:
    """What a trial needs of a group: its devices (and its share's lane on a shared device)
    and its ranks' layout (the backend follows from the devices' kind)."""

    devices: tuple[str, ...]
    data: int
    pipeline: int
    fork: bool = False  # a fork server (``reuse: false`` on one CPU slot)
    share: int = 0  # the lane on a device shared among small trials: one group per lane

    @classmethod
    def of(cls, spec: TrialSpec, lease: Lease) -> GroupKey:
        parallel = spec.trial.parallel
        devices = tuple(str(d) for d in lease.devices)
        return cls(devices, parallel.data, parallel.pipeline, share=lease.share)


def group_command(socket_path: Path, nproc: int, rdzv_id: str, fork: bool = False) -> list[str]:
    """The command line of a warm group: torchrun over ``nproc`` ranks, or one process (a
    fork server with ``fork``)."""
    if fork:
        return [sys.executable, "-m", ENTRY, "--fork-server", str(socket_path)]
    if nproc == 1:  # no process group to form: the agent would only add its start-up
        return [sys.executable, "-m", ENTRY, "--warm", str(socket_path)]
    cmd = torchrun_command(socket_path, nproc, rdzv_id)
    return [*cmd[:-1], "--warm", cmd[-1]]


def single_rank_env() -> dict[str, str]:
    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@dataclass
class Task:
    """One trial handed to a group: which ranks got it, and their answers."""

    number: int
    spec: TrialSpec
    sent: set[int] = field(default_factory=set)
    codes: dict[int, int] = field(default_factory=dict)
    code: int | None = None


class WarmGroup:
    """One warm group: its agent process (a session of its own), channel, log, current task."""

    def __init__(
        self, key: GroupKey, lease: Lease, threads: int, directory: Path, index: int,
        one_shot: bool = False,
    ) -> None:  # fmt: skip
        self.key = key
        self.one_shot = one_shot  # ``reuse: false``: leaves after its first trial
        self.index = index
        self.nproc = len(lease.devices)
        self.channel = GroupChannel(directory / f"g{index}.sock")
        self.log_path = directory / f"group-{index}.log"
        self._log: IO[bytes] = self.log_path.open("ab")
        self._copied = 0  # how much of the group's log the trials' logs already hold
        env = trial_env(lease, threads)
        self.tag = uuid.uuid4().hex  # HYPERFLEET_LAUNCH of every process of the group
        env[LAUNCH_VAR] = self.tag
        if self.nproc == 1:
            env.update(single_rank_env())
        rdzv_id = f"warm-{os.getpid()}-{index}"
        cmd = group_command(self.channel.path, self.nproc, rdzv_id, fork=key.fork)
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        except OSError as exc:
            self.channel.close()
            self._log.close()
            raise LaunchError(f"cannot start a warm group: {exc}") from None
        self.task: Task | None = None
        self.trials_run = 0
        self.ahead = False  # started ahead of a resize's relaunch (``start_ahead``)
        self.leaving = False  # a rank failed: the group is ending by itself
        self._leaving_since = 0.0

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def ready(self) -> bool:
        """Every rank said hello (called on an idle group: it reads nothing else)."""
        if self.task is None:
            self.channel.pump()
        return len(self.channel.ranks) == self.nproc

    @property
    def idle(self) -> bool:
        return self.task is None and not self.leaving and self.alive

    def submit(self, spec: TrialSpec) -> Task:
        """Hand ``spec`` to the idle group; the task it runs (:class:`~.warm.WarmHandle`
        follows it)."""
        assert self.idle, "a warm group runs one trial at a time"
        self.trials_run += 1
        self.task = Task(self.trials_run, spec)
        with spec.log_path.open("ab") as log:
            log.write(
                f"# hyperfleet launch: warm group {self.index} (pid {self.proc.pid}, {self.nproc} "
                f"rank(s) on {', '.join(self.key.devices)}{', started ahead' * self.ahead}), "
                f"trial {self.trials_run} in it\n"
                .encode()
            )  # fmt: skip
        self.copy_output(spec.log_path)  # the group's start-up, or what it said between trials
        self._pump()
        return self.task

    def _pump(self) -> None:
        """Read answers, hand the current task to ranks that haven't got it."""
        task = self.task
        for rank, msg in self.channel.pump():
            if task is not None and msg.get("task") == task.number:
                task.codes[rank] = int(msg["code"])
        if task is None or task.code is not None:
            return
        for rank in self.channel.ranks:
            if rank not in task.sent:
                task.sent.add(rank)
                self.channel.send(
                    rank,
                    {"task": task.number, "spec": str(task.spec.path),
                     "log": str(task.spec.log_path)},
                )  # fmt: skip

    def poll_task(self, task: Task, grace: float) -> int | None:
        """The task's exit code once its trial ended (see the module docstring), else None."""
        if task.code is not None:
            return task.code
        if task is self.task and not self.leaving:
            self._pump()
            failed = [c for c in task.codes.values() if c != 0]
            if failed:
                self.leaving, self._leaving_since = True, time.monotonic()
            elif len(task.codes) == self.nproc and not self.one_shot:
                task.code, self.task = 0, None
                return 0
            elif len(task.codes) == self.nproc:  # used once: done when its processes are
                self.release()
                self._leaving_since = time.monotonic()
        code = self.proc.poll()
        if code is None and self.leaving and time.monotonic() - self._leaving_since > grace:
            code = self.kill()
        if code is None:
            return None
        failed = [c for c in task.codes.values() if c != 0]
        if failed:
            task.code = failed[0]
        elif len(task.codes) == self.nproc:  # a one-shot group that left as asked
            task.code = 0
        else:  # the group died under the trial (a signal: 128 + its number, as a shell says)
            task.code = 128 - code if code < 0 else (code or 1)
        self.task = None
        self._close_log()
        return task.code

    def copy_output(self, log_path: Path) -> str:
        """Append to the trial's log what the group's own log (the agent's output, the ranks'
        output outside a trial) got since the last copy: the trial's log stays complete when
        the launcher's temporary directory is gone. Returns what it copied."""
        new = b""
        with contextlib.suppress(OSError):
            if not self._log.closed:
                self._log.flush()
            with self.log_path.open("rb") as group:
                group.seek(self._copied)
                new = group.read()
            if not new:
                return ""
            self._copied += len(new)
            with log_path.open("ab") as log:
                log.write(f"# warm group {self.index}'s own output:\n".encode() + new)
                if not new.endswith(b"\n"):
                    log.write(b"\n")
        return new.decode(errors="replace")

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace: float) -> int:
        """SIGTERM the whole group, SIGKILL what is left after ``grace`` seconds."""
        self.leaving = True
        if self.alive:
            self._signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        return self.kill()

    def kill(self) -> int:
        self.leaving = True
        self._signal(signal.SIGKILL)
        kill_tagged(LAUNCH_VAR, self.tag)  # ranks in sessions of their own, wherever they went
        code = self.proc.wait()
        self.channel.close()
        self._close_log()
        return code

    def release(self) -> None:
        """Ask an idle group to leave (end of file on its channel); see :meth:`reap`."""
        self.leaving = True
        self.channel.close()

    def _close_log(self) -> None:
        if not self._log.closed:
            self._log.close()
