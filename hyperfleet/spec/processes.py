"""Whether a process lives, asked by both sides: the platform of the controllers that hold
RUNNING trials (a dead one's trials are stale, :mod:`hyperfleet.platform.storage.stale`) and a
trial of the processes it shares files with."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs on this host, or runs as another user (not ours to signal). A
    zombie (exited, its status not yet collected by its parent) is not alive; where there is no
    ``/proc`` to say so (not Linux), a process that can be signalled counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc, or gone since the signal
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
