"""A resize decided by the controller, carried to the trial at its next report.

The controller (:mod:`hyperfleet.platform.controller.resizing`) writes ``resize.json`` in the
trial's directory: the launch it is for (its attempt) and the devices it is to run at. Rank 0's
recorder (:mod:`hyperfleet.platform.recorder`) looks for it at each report of that launch (one
``stat``; the file is on the host both run on: an elastic trial runs on one host) and, at a
report whose checkpoint is kept, answers PAUSE and renames the file ``resize.taken.json``. The
trial's processes then end as a paused trial's do, and the controller, finding the request
taken, relaunches the trial at its new size from that checkpoint (a PBT pause leaves no taken
request, so the two are told apart). A request of an earlier launch is ignored: its attempt
is not the launch's.

A request is no state to keep across a crash: a worker that dies loses its trials' launches
with it, and a requeued trial starts again at its ``min`` devices.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

REQUEST_FILE = "resize.json"
TAKEN_FILE = "resize.taken.json"


def _read(path: Path, attempt: int | None) -> int | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("attempt") != attempt:
        return None
    devices = data.get("devices")
    return devices if isinstance(devices, int) and devices > 0 else None


def request(trial_dir: str | Path, attempt: int | None, devices: int) -> None:
    """Ask launch ``attempt`` of the trial in ``trial_dir`` to end at its next report, for a
    relaunch at ``devices`` (written whole: the recorder never reads half of it)."""
    directory = Path(trial_dir)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{REQUEST_FILE}.{os.getpid()}"
    partial.write_text(json.dumps({"attempt": attempt, "devices": devices}))
    os.replace(partial, directory / REQUEST_FILE)


def pending(trial_dir: str | Path, attempt: int | None) -> int | None:
    """The devices launch ``attempt`` is asked to resize to, or None (the recorder's look at
    each report: without the file, one failed ``stat``)."""
    path = Path(trial_dir) / REQUEST_FILE
    if not path.exists():
        return None
    return _read(path, attempt)


def take(trial_dir: str | Path) -> None:
    """The recorder answered the request: the controller relaunches the trial at its size."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(Path(trial_dir) / REQUEST_FILE, Path(trial_dir) / TAKEN_FILE)


def taken(trial_dir: str | Path, attempt: int | None) -> int | None:
    """The size launch ``attempt`` ended for, when it took its request; else None."""
    return _read(Path(trial_dir) / TAKEN_FILE, attempt)


def clear(trial_dir: str | Path) -> None:
    """No request left for any launch of the trial."""
    for name in (REQUEST_FILE, TAKEN_FILE):
        with contextlib.suppress(FileNotFoundError):
            (Path(trial_dir) / name).unlink()
