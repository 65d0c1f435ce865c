"""Finding every process of a trial, wherever it went.

A trial's processes are the launcher's child (torchrun's agent, or an in-process worker) and
everything it starts. Their process group is not enough: torch's elastic agent starts each
rank in a session of its own, and a rank whose agent was killed is re-parented, so neither the
group nor the process tree reaches it reliably. Every process of a launch therefore carries
two environment variables, inherited by anything it starts:

* ``HYPERFLEET_TRIAL`` — which trial (storage, sweep and number): an older copy of the same
  trial is found and ended before the trial is launched again;
* ``HYPERFLEET_LAUNCH`` — which launch: stopping it ends every process that carries it.

They are found through ``/proc`` (the processes of this user; Linux). This is the fallback
that cgroups would make exact; it needs no privileges.

A process that runs many trials (a warm rank, an in-process worker) can't carry one trial's
tag from its start; it announces the trial it runs with a *pid file* instead:
``<trial dir>/.pids/<pid>``, written when the trial starts there and removed when it ends
(:func:`running_here`). A file left by a process that was killed names a dead pid, or a pid
taken by a process started later, and is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperfleet.spec.wire import TrialSpec

logger = logging.getLogger(__name__)

TRIAL_VAR = "HYPERFLEET_TRIAL"
LAUNCH_VAR = "HYPERFLEET_LAUNCH"
RDZV_VAR = "HYPERFLEET_RDZV"  # the rendezvous of a trial's launch that spans hosts


def trial_tag(storage_url: str | None, sweep: str, number: int) -> str:
    """The ``HYPERFLEET_TRIAL`` value of a trial: the same in every launch of it."""
    where = hashlib.sha256((storage_url or "").encode()).hexdigest()[:12]
    return f"{where}/{sweep}/{number}"


def tagged(var: str, value: str) -> list[int]:
    """Pids of this user's live processes whose environment has ``var=value``."""
    needle = f"{var}={value}".encode()
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or another user's
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def kill_tagged(var: str, value: str, sig: signal.Signals = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process tagged ``var=value``; their pids."""
    pids = tagged(var, value)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    if fields[0] == "Z":
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return time.time() - uptime + int(fields[19]) / ticks


def _pid_files(trial_dir: str) -> list[int]:
    """Live pids that announced running this trial (see the module docstring)."""
    found = []
    for entry in (Path(trial_dir) / ".pids").glob("*"):
        if not entry.name.isdigit():
            continue
        started = _started_at(int(entry.name))
        try:
            written = entry.stat().st_mtime
        except OSError:
            continue
        if started is not None and started <= written + 1.0 and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def running_here(trial_dir: str) -> Iterator[None]:
    """Announce, for the block, that this process runs the trial of ``trial_dir``."""
    folder = Path(trial_dir) / ".pids"
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / str(os.getpid())
    mine.write_text("")
    try:
        yield
    finally:
        mine.unlink(missing_ok=True)


def end_older_copies(spec: TrialSpec, rdzv_id: str | None = None) -> list[int]:
    """End any older copy of ``spec``'s trial still alive on this host (left by a controller
    that died): processes tagged with the trial, and those that announced running it. With
    ``rdzv_id`` (a launch that spans hosts), the nodes of that same launch on this host are
    not older copies: they are left alone. A trial's first attempt has no older copy (no
    launch of it came before, on any host): its launch reads no process table, a cost each
    quick trial would pay on the controller's path (``/proc`` of every process)."""
    if spec.storage is None or spec.attempt == 1:
        return []
    siblings = set(tagged(RDZV_VAR, rdzv_id)) if rdzv_id else set()
    candidates = set(tagged(TRIAL_VAR, trial_tag(spec.storage, spec.sweep, spec.number)))
    candidates |= set(_pid_files(spec.trial_dir))
    older = []
    for pid in sorted(candidates - siblings):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            older.append(pid)
    if older:
        logger.warning(
            "trial %d: an older copy was still running (pids %s); ended it before the "
            "relaunch", spec.number, sorted(older),
        )  # fmt: skip
    return older


def tag_launch(spec: TrialSpec, rdzv_id: str | None = None) -> dict[str, str]:
    """The environment tags of a new launch of ``spec``'s trial, after ending any older copy
    of the trial still alive on this host (``rdzv_id``: see :func:`end_older_copies`)."""
    end_older_copies(spec, rdzv_id)
    tags = {TRIAL_VAR: trial_tag(spec.storage, spec.sweep, spec.number)}
    if rdzv_id:
        tags[RDZV_VAR] = rdzv_id
    return {**tags, LAUNCH_VAR: uuid.uuid4().hex}


# A process that runs trials one after another (an in-process worker) ----------------------
#
# Tags find what a trial exec'd, but not what it forked (a fork keeps its parent's original
# environment block, which /proc shows), and a worker outlives its trials. So such a worker
# holds its trials' processes three ways: it is a *child subreaper* (Linux's
# PR_SET_CHILD_SUBREAPER), so whatever its trial starts stays in its process tree even when
# the intermediate parent dies (a double fork, a daemon); at each trial's end it kills that
# whole tree (:func:`end_descendants`); and it leads a process group of its own, with a
# *guard* in it (:func:`start_guard`) that kills the group when the worker dies (SIGKILL
# included), the only moment the worker can't clean up itself.

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    import ctypes

    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)


def hold_descendants() -> None:
    """Make this process its descendants' reaper and the leader of a process group of its
    own: what it starts can't leave its tree, and its group is one ``killpg`` away."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    with contextlib.suppress(OSError):  # already a group or session leader
        os.setpgid(0, 0)


def start_guard() -> int:
    """Fork the guard of this process's group: it waits for this process to die (a
    parent-death signal), then kills the group, itself last. Call it with no thread running
    and after :func:`hold_descendants`; returns the guard's pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid != 0:
        return pid
    try:  # the guard: holds no file of its parent (a pipe end would keep its reader waiting)
        for fd in [int(fd) for fd in os.listdir("/proc/self/fd")]:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == parent:  # otherwise it died before the line above
            signal.sigwait({signal.SIGTERM})
    finally:
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(0), signal.SIGKILL)
        os._exit(0)


def _direct_children() -> set[int]:
    """This process's children, from each of its threads' ``/proc/.../children`` (every
    descendant of a subreaper with none of them is gone); psutil's scan of every process
    where the kernel lacks that file."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        import psutil

        return {p.pid for p in psutil.Process().children()}
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found.update(
                int(pid) for pid in Path(f"/proc/self/task/{task}/children").read_text().split()
            )
    return found


def end_descendants(spare: set[int], timeout: float = 5.0) -> list[int]:
    """Kill every descendant of this process but those in ``spare`` (a guard), and reap the
    ones that were re-parented to it; their pids."""
    if not _direct_children() - spare:  # the common case, at a fraction of a millisecond
        return []
    import psutil

    me = psutil.Process()
    try:
        procs = [p for p in me.children(recursive=True) if p.pid not in spare]
    except psutil.Error:
        return []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    left = {p.pid for p in procs}
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        left = {pid for pid in left if _started_at(pid) is not None}  # gone or a zombie
        if left:
            time.sleep(0.005)
    if procs:
        logger.info("ended %d process(es) the trial left running", len(procs))
    return sorted(p.pid for p in procs)
