"""Warm process groups: a trial's processes kept after it ends, to run the next trial.

A cold torchrun trial pays its start-up every time: the launcher's agent and every rank start
an interpreter and import torch, the ranks rendezvous and initialise their process group, rank
0 imports the platform's storage, scheduler and MLflow clients, and the workload imports its
module and loads its data. A **warm group** pays that once. It is the same torchrun agent and
ranks (a single process without an agent when the trial has one device), started with
``trial_entry --warm SOCKET``: each rank joins the process group, connects to the launcher's
:mod:`~.channel` and then runs trial after trial, as the launcher hands them out:

* a task names the trial's spec and log; every rank sends its output to that trial's log,
  puts back the process state a trial may change (:class:`hyperfleet.trials.baseline.Baseline`)
  and runs the trial runtime with the process group kept, then answers with its exit code;
* each trial is still its own trial in storage, its own MLflow run and its own log: what the
  group itself says (torchrun's agent, the ranks' start-up) goes to the group's log in the
  launcher's temporary directory and is copied into the log of the trial it concerns (the
  next trial's, or the one that ended with the group), so a trial's ``log.txt`` is complete
  once the temporary directory is gone;
* the group is idle when every rank answered 0, and the next trial that needs the same layout
  (same devices, same ``data x pipeline``, hence the same backend) runs in it.

An elastic trial's resize asks for its relaunch's group ahead
(:meth:`WarmTorchrunLauncher.start_ahead`): an idle group of the new layout on exactly the
devices the relaunch will lease (the trial's own and those reserved for it), started while
the trial still runs, so its start-up overlaps the trial's last steps at its old size; the
controller carries a growth to the trial once its ranks all said hello
(:meth:`~WarmTorchrunLauncher.ready_ahead`). The relaunch runs in it, and the other idle
groups on its devices (the former size's) leave. On CPU slots only: a rank binds its GPU
when it starts, on devices the trial's ranks use.

A group is torn down, and the next trial gets a fresh one, when a trial fails (a rank answers
non-zero and leaves; torchrun's agent ends the others), is stopped or killed (SIGTERM, then
SIGKILL, to the group's session, as for a cold trial), or when its devices are leased for
another layout. ``trial.reuse: false`` gives every trial of the sweep fresh processes: a group
used once, or, for a one-device CPU trial, a child forked from a *fork server* that imported
torch and the platform once and never runs a trial itself (the same fresh process, without
its start-up; CUDA cannot be used in a forked child, so GPU trials get a group used once).
Groups run in sessions of their own with Linux's parent-death signal set, as cold trials do,
so no process outlives the controller.
"""

from __future__ import annotations

import contextlib
import dataclasses
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from hyperfleet.platform.launcher.base import (
    LOG_TAIL_LINES,
    STOP_GRACE_S,
    Launcher,
    TrialHandle,
    last_lines,
    read_tail,
)
from hyperfleet.platform.launcher.procs import end_older_copies
from hyperfleet.platform.launcher.torchrun import (
    rendezvous_problem,
)
from hyperfleet.platform.launcher.warm_group import GroupKey, Task, WarmGroup
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec


def _ahead_key(lease: Lease, trial: TrialConfig) -> GroupKey:
    return GroupKey(tuple(str(d) for d in lease.devices), trial.parallel.data,
                    trial.parallel.pipeline)  # fmt: skip


class WarmHandle(TrialHandle):
    """One trial in a warm group (the :class:`~.base.TrialHandle` contract)."""

    def __init__(self, group: WarmGroup, task: Task, fail_grace: float = 10.0) -> None:
        self.group = group
        self.task = task
        self.log_path: Path = task.spec.log_path
        self.fail_grace = fail_grace
        self._copied = False
        self._own_end: int | None = None  # the size of the trial's own output, once it ended
        self._group_said = ""  # what the group said meanwhile, copied into the log at the end

    def _ended(self, code: int | None) -> int | None:
        """``code``; once the trial ended, its log gets what the group said meanwhile (a
        group that ended with the trial: the agent says which rank died of what)."""
        if code is not None and not self._copied:
            self._copied = True
            with contextlib.suppress(OSError):
                self._own_end = self.log_path.stat().st_size
            self._group_said = self.group.copy_output(self.log_path)
        return code

    def poll(self) -> int | None:
        return self._ended(self.group.poll_task(self.task, self.fail_grace))

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        code = self.poll()
        if code is not None:
            return code
        code = self.task.code = self.group.stop(grace)
        self._ended(code)
        return code

    def kill(self) -> int:
        code = self.poll()
        if code is not None:
            return code
        code = self.task.code = self.group.kill()
        self._ended(code)
        return code

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The end of the trial's own output and, after it, of what its group said meanwhile
        (both are in the trial's log once it ended: the group's copied after the trial's
        own, whose last lines hold the workload's error)."""
        own = read_tail(self.log_path, lines, self._own_end)
        if not self._group_said.strip():
            return own
        return f"{own}\n# warm group {self.group.index}:\n{last_lines(self._group_said, lines)}"


class WarmTorchrunLauncher(Launcher):
    """Trials in warm groups, kept idle between trials (see the module docstring)."""

    def __init__(self, threads_per_process: int = 1, close_grace: float = 5.0) -> None:
        self.threads_per_process = threads_per_process
        self.close_grace = close_grace
        self.directory = Path(tempfile.mkdtemp(prefix="hf-warm-"))  # short: socket paths
        self.groups: list[WarmGroup] = []
        self.started = 0  # groups started, for tests and benchmarks

    def launch_problem(self, trial: TrialConfig, ranks: int, address: str | None) -> str | None:
        return rendezvous_problem(ranks, address)  # its groups are torchrun's too

    def _new_group(self, key: GroupKey, lease: Lease, one_shot: bool) -> WarmGroup:
        self.started += 1
        group = WarmGroup(
            key, lease, self.threads_per_process, self.directory, self.started, one_shot
        )
        self.groups.append(group)
        return group

    def _group_for(self, spec: TrialSpec, lease: Lease) -> WarmGroup:
        key = GroupKey.of(spec, lease)
        # ``reuse: false`` on one CPU slot: a fork server, a fresh forked child per trial
        # (not with CUDA, which a forked child cannot use; nor across ranks)
        forking = not spec.trial.reuse and len(lease.devices) == 1 and lease.kind == "cpu"
        if forking:
            key = dataclasses.replace(key, fork=True)
        self.reap()
        if spec.trial.reuse or forking:
            for group in self.groups:
                if group.idle and group.key == key:
                    if lease.per_device == 1:  # the lease holds these devices whole
                        self._release_beside(group)
                    return group
        mine = set(key.devices)
        leaving = [g for g in self.groups if g.idle and mine.intersection(g.key.devices)]
        for group in leaving:  # idle groups on these devices (any lane), for another layout,
            # leave first: a share's group does not hold the device's memory for nothing
            group.release()
        self._wait_for(leaving)
        self.reap()
        return self._new_group(key, lease, one_shot=not (spec.trial.reuse or forking))

    def _release_beside(self, group: WarmGroup) -> None:
        """Other idle groups on ``group``'s devices leave (not waited for): a resized trial's
        group of its former size, or one started ahead for a size it did not take."""
        mine = set(group.key.devices)
        for other in self.groups:
            if other is not group and other.idle and mine.intersection(other.key.devices):
                other.release()

    def launch(self, spec: TrialSpec, lease: Lease, rendezvous: object = None) -> WarmHandle:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        end_older_copies(spec)
        group = self._group_for(spec, lease)
        return WarmHandle(group, group.submit(spec))

    def prestart(self, leases: list[Lease], trial: TrialConfig) -> None:
        """Start idle groups for the leases the first trials will most likely get, so their
        start-up overlaps the controller's; a group the pool's choice doesn't match leaves
        when its devices are leased for another layout."""
        if not trial.reuse:
            return
        for lease in leases:
            key = GroupKey(tuple(str(d) for d in lease.devices), trial.parallel.data,
                           trial.parallel.pipeline, share=lease.share)  # fmt: skip
            self._new_group(key, lease, one_shot=False)

    def start_ahead(self, lease: Lease, trial: TrialConfig) -> bool:
        """Start a group for a launch of ``trial`` on exactly ``lease``'s devices (a resize's
        relaunch: devices the trial holds now, and those reserved for its growth), so its
        start-up overlaps the trial's last steps at its old size. Not on GPUs: a rank binds
        its device when it starts (a CUDA context, NCCL's communicator), on devices the
        trial's running ranks use; nor for ``reuse: false``. False when none was started."""
        if not trial.reuse or lease.kind != "cpu" or lease.per_device != 1:
            return False
        self.reap()
        if any(g.idle and g.key == _ahead_key(lease, trial) for g in self.groups):
            return True
        self._new_group(_ahead_key(lease, trial), lease, one_shot=False).ahead = True
        return True

    def ready_ahead(self, lease: Lease, trial: TrialConfig) -> bool:
        """Every rank of the idle group for ``trial`` on ``lease`` said hello: it joined its
        process group and imported what a trial needs (True also when there is no such group
        starting: a group that died is not waited for)."""
        key = _ahead_key(lease, trial)
        return all(g.ready for g in self.groups if g.idle and g.key == key)

    def wait(self, timeout: float) -> bool:
        """Return when a rank of any group answers, or after ``timeout`` seconds: the
        controller reaps a finished trial at once instead of at its next tick."""
        socks = [p.sock for g in self.groups for p in g.channel.peers()]
        socks += [g.channel.server for g in self.groups if g.task is not None]
        if socks:
            with contextlib.suppress(OSError, ValueError):
                select.select(socks, [], [], timeout)
        else:
            time.sleep(timeout)
        return True

    def reap(self) -> None:
        """Forget groups that ended (a group still leaving is waited for in :meth:`close`)."""
        keep = []
        for group in self.groups:
            if group.task is not None or group.alive:
                keep.append(group)
            else:
                group.kill()  # its session may hold ranks the agent left behind
        self.groups = keep

    def _wait_for(self, groups: list[WarmGroup]) -> None:
        """Until ``groups`` ended, ``close_grace`` at most; then they are killed."""
        deadline = time.monotonic() + self.close_grace
        for group in groups:
            with contextlib.suppress(subprocess.TimeoutExpired):
                group.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            group.kill()

    def close(self) -> None:
        """Every group leaves (end of file), then whatever is left after ``close_grace`` is
        killed; the control directory goes."""
        for group in self.groups:
            group.release()
        self._wait_for(self.groups)
        self.groups = []
        shutil.rmtree(self.directory, ignore_errors=True)

    def __del__(self) -> None:  # pragma: no cover - a best effort when close was forgotten
        with contextlib.suppress(Exception):
            for group in self.groups:
                group.kill()
