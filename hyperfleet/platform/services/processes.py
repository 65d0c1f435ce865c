"""Long-running local processes of the native stack: started in a session of their own (so a
stop reaches their children too), known by pid *and* start time (a recycled pid is never
taken for them), stopped with SIGTERM, then SIGKILL after a grace period; and the two probes
the stack waits on, a TCP port that answers and an HTTP URL that returns 200."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hyperfleet.platform.services.ports import log_tail


@dataclass
class Service:
    """A process the stack started: its name, pid, start time (clock ticks since boot, from
    ``/proc``), log file and the URL it serves (if any)."""

    name: str
    pid: int
    started: int
    log: str
    url: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def alive(self) -> bool:
        """The process runs and is the one started (not another that got its pid)."""
        now = start_time(self.pid)
        return now is not None and now == self.started


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` (ticks since boot), or None if no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie is gone, only not yet reaped
        return None
    return int(fields[19])


def spawn(
    name: str,
    cmd: list[str],
    log: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    url: str | None = None,
) -> Service:
    """Start ``cmd`` in a new session, its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    started = start_time(proc.pid)
    return Service(name, proc.pid, started if started is not None else -1, str(log), url)


def stop(service: Service, grace: float) -> None:
    """SIGTERM ``service``'s process group, SIGKILL it after ``grace`` seconds; returns once
    no process of the group is left."""
    if not service.alive():
        _kill_group(service.pid, signal.SIGKILL)  # stragglers of a leader that is gone
        return
    _kill_group(service.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(service.pid):
        _reap(service.pid)
        time.sleep(0.1)
    if group_alive(service.pid):
        _kill_group(service.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and group_alive(service.pid):
            _reap(service.pid)
            time.sleep(0.05)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pid: int) -> None:
    """Collect ``pid`` if this process started it (``stack up`` and ``down`` in one process)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from ``/proc``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # only zombies left (e.g. the leader, not yet reaped by its parent) count as gone
    return bool(group_members(pgid))


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_free(host: str, port: int) -> bool:
    """``host:port`` can be bound now (no server holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_for(
    cond: Callable[[], bool], service: Service | None, timeout: float, what: str
) -> str | None:
    """Poll ``cond`` until it holds; the reason it did not (``service`` died, or timed out),
    with the last lines of ``service``'s log, where it says why in its own words."""
    deadline = time.monotonic() + timeout
    while not cond():
        if service is not None and not service.alive():
            return f"{what}: the process exited{_said(service)}"
        if time.monotonic() > deadline:
            return f"{what}: not ready after {timeout:.0f}s{_said(service)}"
        time.sleep(0.2)
    return None


def _said(service: Service | None) -> str:
    return f": {log_tail(Path(service.log))}" if service is not None else ""
