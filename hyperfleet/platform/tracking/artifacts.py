"""A trial's files as artifacts of its run: ``config.json``, ``spec.json`` and ``log.txt``.

``config.json`` is the resolved trial configuration (the sweep's ``trial:`` section with the
sampled system knobs applied and the workload's params in full), written when the run starts;
``spec.json`` (everything the trial's processes were launched with) and ``log.txt`` (every
rank's output; its last ``LOG_LIMIT`` bytes when longer) each time a launch of the trial ends,
replacing the previous copies. A failed trial's run also gets its whole error as ``error.txt``,
and the ends of its error and its log (whole lines, under MLflow's 8000-character tag limit)
as the run's description, the first thing its page shows.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperfleet.platform.credentials import mask_text
from hyperfleet.spec.wire import LOG_FILE, SPEC_FILE

LOG_LIMIT = 10 << 20
NOTE_TAIL = 3500  # of the error and of the log each: the note stays under MLflow's tag limit
TAG_LIMIT = 8000  # MLflow's longest tag value (a longer one is cut, with a warning)
ERROR_FILE = "error.txt"  # a failed trial's whole error, an artifact of its run


def log_json(client: Any, run_id: str, data: Mapping[str, Any], name: str) -> None:
    client.log_text(run_id, json.dumps(data, indent=2, default=str), name)


def log_masked(client: Any, run_id: str, path: Path, folder: str) -> None:
    """Upload the text file ``path`` into ``folder`` with every URL's password as ``***`` (a
    sweep file may name its storage with one)."""
    text = mask_text(path.read_text(errors="replace"))
    client.log_text(run_id, text, f"{folder}/{path.name}")


def _tail(path: Path, limit: int) -> bytes:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > limit:
            f.seek(size - limit)
        return f.read()


def log_trial_files(client: Any, run_id: str, trial_dir: Path) -> None:
    """Upload the trial's ``spec.json`` and ``log.txt`` (those that exist)."""
    spec = trial_dir / SPEC_FILE
    if spec.is_file():
        client.log_artifact(run_id, str(spec))
    log = trial_dir / LOG_FILE
    if not log.is_file():
        return
    if log.stat().st_size <= LOG_LIMIT:
        client.log_artifact(run_id, str(log))
        return
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp) / LOG_FILE
        cut.write_bytes(
            b"(earlier output cut; the last %d bytes follow)\n" % LOG_LIMIT + _tail(log, LOG_LIMIT)
        )
        client.log_artifact(run_id, str(cut))


def line_tail(text: str, limit: int) -> str:
    """The last whole lines of ``text`` that fit in ``limit`` characters (a last line longer
    than that: its end, after ``…``), so a description never starts mid-word."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    if newline < 0 or newline == len(cut) - 1:
        return "…" + cut[-(limit - 1) :]
    return cut[newline + 1 :]


def failure_note(error: str, trial_dir: Path | None) -> str:
    """The description of a failed trial's run: the end of its error, then the end of its
    log, each from a line's start; under MLflow's tag limit (the whole error is the run's
    ``error.txt``)."""
    text = line_tail(error, NOTE_TAIL) or "no error message"
    note = (
        f"**Failed.** The whole error: `{ERROR_FILE}` in the run's artifacts.\n\n```\n{text}\n```"
    )
    log = None if trial_dir is None else trial_dir / LOG_FILE
    if log is not None and log.is_file() and LOG_FILE not in text:
        tail = line_tail(_tail(log, NOTE_TAIL * 4).decode(errors="replace"), NOTE_TAIL)
        if tail and tail not in text:
            note += f"\n\nEnd of `log.txt`:\n\n```\n{tail}\n```"
    return note[:TAG_LIMIT]
