"""The control channel of a warm process group: JSON lines over a Unix socket.

The launcher listens on a socket in its control directory *before* it starts the group, so a
rank can connect the moment it is up; every rank connects once, says which rank it is
(``{"rank": r, "pid": p}``) and then waits for tasks. A task is one line
``{"task": n, "spec": ..., "log": ...}``; each rank answers ``{"task": n, "code": c}`` when its
part of the trial has ended (0: the trial ran to an outcome, recorded by rank 0). Closing the
launcher's end (end of file) tells the ranks to leave.

Both ends are small on purpose: the rank's end (:class:`RankChannel`) blocks, since a rank has
nothing else to do; the launcher's end (:class:`GroupChannel`) never blocks, since it is read
from the controller's loop through a trial handle's ``poll``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

Message = dict[str, Any]


def _line(msg: Message) -> bytes:
    return json.dumps(msg).encode() + b"\n"


class RankChannel:
    """A rank's end: connect, say hello, then receive tasks and send answers (blocking)."""

    def __init__(self, path: str | Path, rank: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self._reader = self.sock.makefile("rb")
        self.send({"rank": rank, "pid": os.getpid()})

    def send(self, msg: Message) -> None:
        self.sock.sendall(_line(msg))

    def receive(self) -> Message | None:
        """The next task; None when the launcher closed the channel (or is gone)."""
        try:
            line = self._reader.readline()
        except OSError:
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._reader.close()
            self.sock.close()


class _Peer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.rank: int | None = None


class GroupChannel:
    """The launcher's end for one group: accepts its ranks and reads their lines without
    ever waiting; ``ranks`` are those that said hello."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(64)
        self.server.setblocking(False)
        self._peers: list[_Peer] = []
        self.ranks: dict[int, _Peer] = {}

    def pump(self) -> list[tuple[int, Message]]:
        """Accept waiting ranks and return every complete line received: ``(rank, msg)``
        (hellos included)."""
        while True:
            try:
                sock, _ = self.server.accept()
            except (BlockingIOError, OSError):
                break
            sock.setblocking(False)
            self._peers.append(_Peer(sock))
        out: list[tuple[int, Message]] = []
        for peer in self.peers():
            self._read(peer, out)
        return out

    def _read(self, peer: _Peer, out: list[tuple[int, Message]]) -> None:
        while True:
            try:
                chunk = peer.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:  # the rank is gone: nothing more will come
                with contextlib.suppress(OSError):
                    peer.sock.close()
                break
            peer.buf += chunk
        while b"\n" in peer.buf:
            raw, peer.buf = peer.buf.split(b"\n", 1)
            msg = json.loads(raw)
            if peer.rank is None and "rank" in msg:
                peer.rank = int(msg["rank"])
                self.ranks[peer.rank] = peer
            if peer.rank is not None:
                out.append((peer.rank, msg))

    def peers(self) -> list[_Peer]:
        """Connections still open (for ``select``: a line or an end of file is waiting)."""
        return [p for p in self._peers if p.sock.fileno() >= 0]

    def send(self, rank: int, msg: Message) -> bool:
        """Send one line to ``rank`` (small: the socket's buffer takes it whole); False if
        that rank's end is gone."""
        peer = self.ranks.get(rank)
        if peer is None:
            return False
        try:
            peer.sock.setblocking(True)
            peer.sock.sendall(_line(msg))
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                peer.sock.setblocking(False)
        return True

    def close(self) -> None:
        """End of file for every rank (they leave), and the socket file removed."""
        for peer in self._peers:
            with contextlib.suppress(OSError):
                peer.sock.close()
        self._peers, self.ranks = [], {}
        with contextlib.suppress(OSError):
            self.server.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
