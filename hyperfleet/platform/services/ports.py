"""Servers started on a port of the system's choosing, and what their logs say when they fail.

A free port is found by binding port 0 and closing the socket; the server binds it a moment
later, and another process may take it in between. :func:`start_on_free_port` makes that race
cost another try, not a failure: a start that fails and whose log (only what that try wrote)
says the address was in use gets a new port. Any other failure is raised as it came, and a
server's error names the reason in its log's own last lines (:func:`log_tail`). PostgreSQL,
the MLflow tracking server and Streamlit each log a taken port in their words (:data:`TAKEN`).

A server a command becomes (``hyperfleet mlflow``, ``hyperfleet dashboard``) checks its port
before it prints its address (:func:`port_to_serve`): a port given with ``--port`` that another
process holds is refused with one line naming it; the command's default port, when taken, is
replaced by a free one, and the command says which. (The server binds a moment after the check:
a process that takes the port in between makes the server fail in its own words.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hyperfleet.errors import ConfigError

T = TypeVar("T")

TRIES = 5
#: how servers say a port is taken: the OS's words (PostgreSQL, uvicorn, gunicorn),
#: PostgreSQL's own (its last line of a failed bind: what a three-line tail holds), Streamlit's
#: and ``hyperfleet stack up``'s check of its ports
TAKEN = (
    "address already in use",
    "could not bind",
    "could not create any tcp/ip sockets",
    "is not available",
    "connection in use",
    "is in use",
)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now (another process may take it before use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_size(log: Path) -> int:
    """How many bytes ``log`` holds now (0 if it does not exist): where a new try's lines start."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def log_text(log: Path, since: int = 0) -> str:
    """What ``log`` holds from byte ``since`` on ("" if it cannot be read)."""
    try:
        with log.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_tail(log: Path, lines: int = 3, since: int = 0) -> str:
    """The last ``lines`` non-blank lines of ``log`` (from byte ``since``), joined by `` | ``:
    one line that says why a server did not start, in its own words. A server that logs more
    after its error (uvicorn's shutdown, MLflow's "server failed" line) would push the reason
    out of the tail: the last line before the tail that says a port was taken or names an
    error comes first."""
    if not log.exists():
        return f"no server log at {log}"
    text = log_text(log, since)
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    tail = kept[-lines:]
    before = kept[: len(kept) - len(tail)]
    if not any(_says_why(line) for line in tail):
        cause = next((line for line in reversed(before) if _says_why(line)), None)
        tail = [cause, *tail] if cause else tail
    return " | ".join(tail) or f"{log} is empty"


def _says_why(line: str) -> bool:
    return says_taken(line) or "error" in line.lower()


def says_taken(text: str) -> bool:
    """Whether ``text`` (a server's log, a command's error) says a port was in use."""
    lower = text.lower()
    return any(words in lower for words in TAKEN)


def port_taken(log: Path, since: int = 0) -> bool:
    """Whether ``log`` (from byte ``since``) says the server's port was in use."""
    return says_taken(log_text(log, since))


def listened_by(port: int, pids: list[int]) -> bool:
    """Whether one of ``pids`` holds the socket listening on TCP ``port`` (from ``/proc``): the
    server that answers there is the one started, not another that took its port first."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return True
    return False


def start_on_free_port(
    start: Callable[[int], T],
    log: Path,
    *,
    tries: int = TRIES,
    choose: Callable[[], int] | None = None,
) -> T:
    """``start(port)`` on a port from ``choose`` until a server comes up; what it returned.

    ``start`` raises when its server does not come up. A failed try whose lines in ``log`` say
    the port was taken (another process bound it first) costs another port, ``tries`` in all;
    any other failure, and the last one, is raised as ``start`` raised it. ``choose``: default
    :func:`free_port` (looked up at the call, so a test may hand out a port it holds)."""
    for attempt in range(tries):
        port = choose() if choose is not None else free_port()
        since = log_size(log)
        try:
            return start(port)
        except Exception:
            if attempt == tries - 1 or not port_taken(log, since):
                raise
    raise ValueError(f"tries: {tries}; use 1 or more")


def bind_problem(host: str, port: int) -> OSError | None:
    """Why a server could not listen on ``host:port`` now (None: it could). Bound as servers
    bind, with ``SO_REUSEADDR``: a port only in TIME_WAIT is free, one a process listens on
    is not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return None  # a host that does not resolve: the server says so in its own words
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            return exc
    return None


def port_to_serve(host: str, port: int | None, default: int) -> tuple[int, str | None]:
    """The port a server on ``host`` is to listen on, and a line to show when it is not the
    one asked for. ``port`` (given with ``--port``) must be free: ``ConfigError`` naming it
    otherwise. None: ``default``, or a free port when ``default`` is taken."""
    wanted = default if port is None else port
    problem = bind_problem(host, wanted)
    if problem is None:
        return wanted, None
    if problem.errno != errno.EADDRINUSE:  # not this host's address, a privileged port
        raise ConfigError(
            f"--host/--port: cannot listen on {host}:{wanted} ({problem.strerror}); give an "
            f"address of this host and a port above 1023"
        )
    if port is not None:
        raise ConfigError(
            f"--port: {host}:{port} is in use by another process; give another --port (or "
            f"leave --port out to serve on a free one)"
        )
    chosen = free_port(host)
    return chosen, f"port {wanted} is in use on {host}; serving on {chosen} (--port to choose)"
