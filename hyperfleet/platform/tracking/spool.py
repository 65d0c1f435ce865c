"""The spool: a trial run's MLflow records on local disk, written before they are sent.

Reports are worth keeping even while the tracking server is not there to take them. Rank 0's
sink appends each batch of records to ``spool.jsonl`` in the trial's ``mlflow/`` folder (one
JSON line per batch: metrics as ``[key, value, timestamp_ms, step]``, and tags) and *ships*
the lines not sent yet, oldest first, one ``log_batch`` per group of lines; after each call
MLflow accepted, the shipped offset (``state.json``) moves past those lines. A failure leaves
the offset where it was, so the same lines go out again later, in the same order: from the
sink, from the controller when the trial ends, or from ``hyperfleet mlflow sync``.

Each point lands once. The offset moves only after MLflow accepted a call; a call MLflow
applied but whose answer was lost is harmless to repeat, because a point keeps the timestamp
it was reported at and MLflow's SQL stores hold one row per (key, step, timestamp, value).
Several processes may ship one spool (the trial, then the controller): a file lock makes them
take turns. Appending takes a second lock, held for one write only, so a report never waits
for a shipment (which may wait for a slow server); emptying or setting aside the file takes
both.

The spool also knows, per series (``report``, ``system``), the last step ever appended
(``through``: read from the file, and kept in ``state.json`` when the file is emptied after
everything in it was sent): a resumed trial logs only later steps, so no step is logged twice,
without asking MLflow (which may be down) what it holds. Appending writes the file only (no
state file rename per batch: a rename costs more than the append on some file systems). A
spool belongs to one run: bound to another run id it starts afresh, keeping the old file as
``spool-<old run id>.jsonl``. A run id that is still ``pending:N`` (its run not created yet,
see :mod:`.tracker`) binds to anything.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from hyperfleet.platform.tracking.client import Point, is_transient

logger = logging.getLogger(__name__)

PENDING = "pending:"
_MAX_METRICS = 1000  # MLflow's limit per log_batch
_MAX_TAGS = 100
_LINE_METRICS = 500  # points per spool line, so that any line fits one call
_COMPACT_BYTES = 1 << 20


class _Mutex:
    """A lock across this process's threads and other processes, cheap enough to take at
    every report (tens of microseconds): a thread lock, then ``flock`` on a file opened for
    the block only (a spool object keeps no file open)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.Lock()
        self._fd = -1

    def __enter__(self) -> None:
        self._threads.acquire()
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = -1
            self._threads.release()
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # releases the flock
        self._fd = -1
        self._threads.release()


def is_pending(run_id: str | None) -> bool:
    """A placeholder for a run the controller has not been able to create yet."""
    return run_id is None or run_id.startswith(PENDING)


def series_of(key: str) -> str:
    """The series a metric belongs to, for :meth:`Spool.through`."""
    return "system" if key.startswith("system/") else "report"


@dataclass
class _Line:
    end: int  # byte offset just after the line
    metrics: list[Point] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


class Spool:
    """One run's records on disk (see the module docstring)."""

    FILE = "spool.jsonl"
    STATE = "state.json"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / self.FILE
        self._state_path = self.directory / self.STATE
        self._lock = FileLock(str(self.directory / ".lock"))  # shipping
        self._appending = _Mutex(self.directory / ".append.lock")  # the file's end
        self._scanned: tuple[tuple[int, ...], dict[str, int]] = ((), {})

    # -- state -------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads(self._state_path.read_text())
        except (OSError, ValueError):
            data = {}
        data.setdefault("run_id", None)
        data.setdefault("offset", 0)
        data.setdefault("through", {})
        return data

    def _save(self, state: Mapping[str, Any]) -> None:
        tmp = self._state_path.with_name(f".{self.STATE}.{os.getpid()}")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self._state_path)

    def bind(self, run_id: str) -> None:
        """Make this spool ``run_id``'s; another run's records are set aside first. A pending
        id never replaces a bound one (that run was created meanwhile: see :meth:`run_id`)."""
        with self._lock:
            state = self._state()
            old = state["run_id"]
            if old == run_id or (is_pending(run_id) and old is not None):
                return
            if old is not None and not is_pending(old):  # another run's records
                with self._appending:
                    if self.path.exists():
                        os.replace(self.path, self.directory / f"spool-{old}.jsonl")
                state = {"run_id": None, "offset": 0, "through": {}}
            state["run_id"] = run_id
            self._save(state)

    def run_id(self) -> str | None:
        """The run this spool is bound to, or the id the controller wrote in ``run_id`` once
        it created the run of a pending trial (None while neither is known)."""
        bound = self._state()["run_id"]
        if bound is not None and not is_pending(bound):
            return str(bound)
        try:
            created = (self.directory / "run_id").read_text().strip()
        except OSError:
            return None
        return created or None

    def publish_run_id(self, run_id: str) -> None:
        """Controller side: the run of a pending trial exists now (its sink looks here)."""
        tmp = self.directory / f".run_id.{os.getpid()}"
        tmp.write_text(run_id)
        os.replace(tmp, self.directory / "run_id")

    def through(self, series: str = "report") -> int:
        """The last step of ``series`` ever appended (-1 if none): the larger of what the
        state kept when the file was last emptied and what the file holds now."""
        base = int(self._state()["through"].get(series, -1))
        return max(base, self._scan().get(series, -1))

    def _scan(self) -> dict[str, int]:
        """The last step per series in the file (read again only when the file changed)."""
        try:
            st = self.path.stat()
            version: tuple[int, ...] = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            version = (0,)
        if self._scanned[0] != version:
            found: dict[str, int] = {}
            for line in self._lines(0):
                for key, _value, _ts, step in line.metrics:
                    series = series_of(key)
                    found[series] = max(found.get(series, -1), step)
            self._scanned = (version, found)
        return self._scanned[1]

    def unsent_bytes(self) -> int:
        size = self.path.stat().st_size if self.path.exists() else 0
        return max(0, size - int(self._state()["offset"]))

    # -- writing -----------------------------------------------------------------------------

    def append(self, metrics: Sequence[Point], tags: Mapping[str, str] | None = None) -> None:
        """Append records (nothing is sent here): one write, no state to update."""
        if not metrics and not tags:
            return
        chunks = [
            list(metrics[i : i + _LINE_METRICS]) for i in range(0, len(metrics), _LINE_METRICS)
        ]
        lines = [json.dumps({"m": c}) for c in chunks]
        if tags:
            lines.append(json.dumps({"t": dict(tags)}))
        data = memoryview(("\n".join(lines) + "\n").encode())
        with self._appending:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    os.write(fd, b"\n")  # a line cut short (a crash, a full disk) stays apart
                while data:
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)

    # -- shipping ----------------------------------------------------------------------------

    def _lines(self, offset: int) -> Iterator[_Line]:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(offset)
            pos = offset
            for raw in f:
                if not raw.endswith(b"\n"):
                    return  # being written by a process that died mid-line: not yet a record
                pos += len(raw)
                try:
                    data = json.loads(raw)
                except ValueError:
                    logger.warning("spool %s: skipping a damaged line", self.path)
                    yield _Line(pos)
                    continue
                metrics = [(str(k), float(v), int(ts), int(s)) for k, v, ts, s in data.get("m", [])]
                yield _Line(pos, metrics, {str(k): str(v) for k, v in data.get("t", {}).items()})

    @staticmethod
    def _groups(lines: Iterable[_Line]) -> Iterator[list[_Line]]:
        group: list[_Line] = []
        n_metrics = n_tags = 0
        for line in lines:
            if group and (
                n_metrics + len(line.metrics) > _MAX_METRICS or n_tags + len(line.tags) > _MAX_TAGS
            ):
                yield group
                group, n_metrics, n_tags = [], 0, 0
            group.append(line)
            n_metrics += len(line.metrics)
            n_tags += len(line.tags)
        if group:
            yield group

    def ship(
        self, client: Any, run_id: str, last: tuple[list[Point], dict[str, str]] | None = None
    ) -> int:
        """Send every unsent line to ``run_id`` in order; the number of points sent.
        ``client``: one of :func:`~.client.open_client`'s (its ``log_points``). ``last``:
        points and tags to send after them, in the same request as the last lines when they
        fit (a run's end: one MLflow write fewer per trial).

        Raises the first transient failure (what was sent before it stays sent); a request
        MLflow rejects as invalid is logged and skipped, so it cannot block the rest.
        """
        extra_points, extra_tags = last or ([], {})
        sent = 0
        with self._lock:
            state = self._state()
            groups = self._groups(self._lines(int(state["offset"])))
            group = next(groups, None)
            while group is not None:
                following = next(groups, None)
                metrics = [point for line in group for point in line.metrics]
                tags = {k: v for line in group for k, v in line.tags.items()}
                along = following is None and (
                    len(metrics) + len(extra_points) <= _MAX_METRICS
                    and len(tags) + len(extra_tags) <= _MAX_TAGS
                )
                try:
                    if metrics or tags:
                        if along:
                            client.log_points(run_id, metrics + extra_points, tags | extra_tags)
                            extra_points, extra_tags = [], {}
                        else:
                            client.log_points(run_id, metrics, tags)
                except Exception as exc:
                    if is_transient(exc):
                        raise
                    logger.warning(
                        "MLflow rejected %d spooled records of run %s: %s",
                        len(metrics) + len(tags),
                        run_id,
                        exc,
                    )
                else:
                    sent += len(metrics)
                state["offset"] = group[-1].end
                self._save(state)
                group = following
            self._compact(state)
        if extra_points or extra_tags:  # nothing to send with, or rejected with the lines
            client.log_points(run_id, extra_points, extra_tags)
        return sent

    def _compact(self, state: dict[str, Any]) -> None:
        """Empty the file once everything in it was sent (``through`` moves to the state)."""
        if not self.path.exists():
            return
        if self.path.stat().st_size < _COMPACT_BYTES:
            return
        with self._appending:  # no append between the check and the truncation
            size = self.path.stat().st_size
            if int(state["offset"]) < size:
                return
            through = dict(state["through"])
            for series, step in self._scan().items():
                through[series] = max(int(through.get(series, -1)), step)
            state["through"], state["offset"] = through, 0
            self._save(state)
            self.path.write_bytes(b"")
