"""Checkpoint replicas in object storage (``s3://``, ``gs://``, ``az://``) through fsspec.

A replica in an object store holds the same files as a local one: ``step-NNNNNNNNN.pt`` and
its ``.sha256`` beside it, one folder per trial under the sweep's prefix. fsspec picks the
store's package from the URL's scheme (``s3fs`` for S3 and compatible stores such as MinIO,
``gcsfs``, ``adlfs``); that package reads the credentials from the store's standard
environment or files (for S3: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``,
``~/.aws/credentials``, an instance role; ``AWS_ENDPOINT_URL`` for a store that is not AWS),
so nothing hyperfleet writes ever holds one.

**Uploads run in the background.** A save writes the local checkpoint as before, hard-links
it into ``.upload/`` beside it (so pruning the local copy cannot pull it from under the
upload) and queues it; one thread per trial uploads the queue in order: the ``.pt`` first,
then its ``.sha256``. The report does not wait, unless uploads fall ``MAX_PENDING`` behind:
then the save waits for a slot at most ``SLOT_WAIT_S`` (local disk stays bounded), and when
none frees, that checkpoint's upload is skipped (a log line; the next checkpoint is uploaded).
Removals (pruning, a PBT member dropping the steps it gave up) go through the same queue,
after the uploads queued before them. An upload that fails is logged and the step removed
from the store (an older copy of that step must never be restored); the trial goes on, its
local copy intact.

**A store that stops answering never stalls the trial.** Every call to the store has a connect
and a read timeout and a bounded number of attempts (``checkpoint.connect_timeout``,
``read_timeout``; ``ATTEMPTS``). Once a call has failed, or a save found no slot, the store
counts as unreachable from when that call began: later saves skip their upload at once when
no slot is free, and the trial's record gets a note (``checkpoint replica URL unreachable
since TIME: N uploads skipped``) that ``sweep status`` and the live view show. The first call
that succeeds again ends the outage (the note then says from when to when).

**A trial's end waits for its uploads** (:meth:`ObjectReplica.close`, called by the runtime
before it records the outcome, also when it is stopped by SIGTERM), so a completed, paused
or stopped trial's checkpoints are all in the store before another host may resume it; with
the store unreachable, only for the call in flight (bounded by its timeouts): what is still
queued is left undone, logged and counted in the note. A
process killed outright (SIGKILL, a lost host) loses only the upload in flight: an object
store shows an object whole or not at all, and the checksum goes up after the file, so the
step is either complete or refused; restoring then takes the previous checkpoint, which was
complete — a kill costs at most the checkpoints still queued, never a completed one.

**Downloads are verified**: the file is fetched to a temporary name, its SHA-256 compared
with the stored one, and only then renamed into place; a corrupt or incomplete object is
refused with an error naming it and both checksums, and the previous step is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hyperfleet.spec.stores import ATTEMPTS as STORE_ATTEMPTS
from hyperfleet.spec.stores import store_options
from hyperfleet.spec.trial import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from hyperfleet.trials.files import atomic_write_bytes, sha256_file
from hyperfleet.trials.outage import StoreOutage, clock

logger = logging.getLogger("hyperfleet.trials.checkpoint")

#: uploads queued or running before a save waits for one to finish
MAX_PENDING = 2
#: seconds between looks at the store while waiting for a step (a donor's upload in flight)
POLL_S = 0.5
#: the longest a save waits for an upload slot before it skips that checkpoint's upload
SLOT_WAIT_S = 3.0
#: attempts per object store call (botocore's standard retry mode, with its backoff)
ATTEMPTS = STORE_ATTEMPTS


class ReplicaChecksumError(Exception):
    """A downloaded checkpoint does not match its stored checksum."""


def _name(step: int) -> str:
    return f"step-{step:09d}.pt"


class ObjectReplica:
    """One trial's checkpoints in an object store folder ``url`` (see the module docstring).

    ``staging``: a local directory on the same file system as the checkpoints, where a save's
    file is hard-linked until its upload ends."""

    def __init__(
        self,
        url: str,
        staging: Path,
        timeouts: tuple[float, float] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        notify: Callable[[str], None] | None = None,
    ) -> None:
        """``timeouts``: connect and read, in seconds per attempt; ``notify``: told (on the
        saving thread) what the trial's record should say about an outage of the store."""
        self.url = url.rstrip("/")
        self._timeouts = timeouts
        self._op_began: float | None = None  # wall clock: when the call in flight began
        self.outage = StoreOutage(self.url, notify)
        self._closing = False
        self.directory = self.url  # what messages name, as a local location's directory
        self._staging = staging
        self._fs: Any = None
        self._root = ""
        self._known: set[int] | None = None  # steps in the store, as this process wrote them
        self._ops: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._slots = threading.BoundedSemaphore(MAX_PENDING)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- the store -------------------------------------------------------------------------

    @property
    def fs(self) -> Any:
        if self._fs is None:
            from fsspec.core import url_to_fs

            options = self._options()
            self._fs, self._root = url_to_fs(self.url, **options)
            if options:
                self._fs.retries = 1  # s3fs's own retries on top of botocore's: none
        return self._fs

    def _options(self) -> dict[str, Any]:
        """The store package's options: timeouts and bounded attempts, no ``Expect:
        100-continue`` for S3 (:func:`hyperfleet.spec.stores.store_options`)."""
        return store_options(self.url, self._timeouts, ATTEMPTS)

    def key(self, step: int, suffix: str = ".pt") -> str:
        self.fs  # noqa: B018 - resolves self._root
        return f"{self._root}/{_name(step)[: -len('.pt')]}{suffix}"

    def steps(self) -> list[int]:
        """Steps with a ``.pt`` object in the store (listed afresh), oldest first; none when
        the store does not answer (logged: the trial goes on with its local copies)."""
        try:
            return self._list()
        except Exception as exc:  # noqa: BLE001 - any store error: as if it held nothing
            logger.warning("could not list checkpoints in %s: %s", self.url, exc)
            self.outage.began(None)
            return []

    def _list(self) -> list[int]:
        fs = self.fs
        fs.invalidate_cache(self._root)
        try:
            names = fs.ls(self._root, detail=False)
        except FileNotFoundError:
            names = []
        found = []
        for name in names:
            base = str(name).rsplit("/", 1)[-1]
            if base.startswith("step-") and base.endswith(".pt") and base[5:-3].isdigit():
                found.append(int(base[5:-3]))
        found.sort()
        with self._lock:
            if self._known is None:
                self._known = set(found)
        return found

    def checksum(self, step: int) -> str | None:
        """The stored SHA-256 of ``step`` (None: not there, or the store does not answer)."""
        try:
            return bytes(self.fs.cat_file(self.key(step, ".sha256"))).decode().strip()
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - any store error: as if it were not there
            logger.warning("could not read a checksum in %s: %s", self.url, exc)
            self.outage.began(None)
            return None

    def fetch(self, step: int, dest: Path) -> None:
        """Download ``step`` to ``dest`` (and its ``.sha256``), verified; raises
        ``FileNotFoundError`` when it is not there, :class:`ReplicaChecksumError` when the
        object does not match its checksum (nothing is written then)."""
        expected = self.checksum(step)
        if expected is None:
            raise FileNotFoundError(f"{self.url}/{_name(step)} has no checksum in the store")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.download-{os.getpid()}")
        try:
            self.fs.get_file(self.key(step), str(tmp))
            got = sha256_file(tmp)
            if got != expected:
                raise ReplicaChecksumError(
                    f"checkpoint {self.url}/{_name(step)} is corrupt: its SHA-256 is {got}, the "
                    f"stored checksum {expected}; refused"
                )
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        atomic_write_bytes(dest.with_suffix(".sha256"), expected.encode())

    def verify(self, step: int) -> bool:
        """Whether the stored copy of ``step`` is intact (downloads it to check)."""
        probe = self._staging / f"verify-{os.getpid()}" / _name(step)
        try:
            self.fetch(step, probe)
            return True
        except (FileNotFoundError, ReplicaChecksumError):
            return False
        finally:
            shutil.rmtree(probe.parent, ignore_errors=True)

    def wait_for(self, step: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``step``'s checksum to appear in the store."""
        end = time.monotonic() + timeout
        while self.checksum(step) is None:
            if time.monotonic() >= end:
                return False
            time.sleep(POLL_S)
        return True

    # -- writes, in the background ---------------------------------------------------------

    def put(self, path: Path, step: int) -> None:
        """Queue the upload of the local checkpoint ``path`` of ``step`` (and its checksum)."""
        self._staging.mkdir(parents=True, exist_ok=True)
        staged = self._staging / f"{_name(step)}.{time.monotonic_ns()}"
        try:
            os.link(path, staged)
        except OSError:  # a file system without hard links: a copy
            shutil.copyfile(path, staged)
        digest = path.with_suffix(".sha256").read_text().strip()
        if self._known is None:
            self._known = set()  # once per process, in the background: what earlier
            self._submit(self._list_known)  # attempts left there, to prune it
        if not self._slot():
            staged.unlink(missing_ok=True)
            since = clock(self.outage.since)
            why = f"the store has not answered since {since} (uploads pending)"
            self.outage.skipped(step, f"{why}; the next checkpoint is uploaded")
        else:
            with self._lock:
                self._known.add(step)
            self._submit(self._upload, staged, step, digest)
        self.outage.tell()

    def _slot(self) -> bool:
        """An upload slot: at once if one is free; else wait ``SLOT_WAIT_S`` unless the store
        is already known to be unreachable (then never)."""
        if self._slots.acquire(blocking=False):
            return True
        if self.outage.since is None and self._slots.acquire(timeout=SLOT_WAIT_S):
            return True
        self.outage.began(self._op_began)  # the call in flight has not ended: away since then
        return False

    def prune(self, keep: int, protected: Callable[[], Iterable[int]] | None = None) -> None:
        """Queue the removal of the steps beyond the newest ``keep`` but the protected ones."""
        known = sorted(self._known if self._known is not None else self.steps())
        old = known[:-keep]
        if old and protected is not None:
            pinned = set(protected())
            old = [s for s in old if s not in pinned]
        self.remove(old)

    def remove(self, steps: Iterable[int]) -> None:
        steps = list(steps)
        if not steps:
            return
        with self._lock:
            if self._known is not None:
                self._known.difference_update(steps)
        self._submit(self._delete, steps)

    def flush(self) -> None:
        """Wait until every queued upload and removal has ended."""
        if self._thread is not None:
            self._ops.join()

    def close(self) -> None:
        """:meth:`flush`, then end the uploading thread."""
        if self._thread is not None:
            self._closing = True  # what is still queued once the store is away is dropped
            self._ops.join()
            self._ops.put(None)
            self._thread.join()
            self._thread = None
        self.outage.tell()  # the outage's end, or what it cost, in the trial's record

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, name="hyperfleet-replica", daemon=True
            )
            self._thread.start()
        self._ops.put((fn, args))

    def _work(self) -> None:
        while True:
            item = self._ops.get()
            try:
                if item is None:
                    return
                fn, args = item
                if self._closing and self.outage.since is not None:
                    self._drop(fn, args)
                    continue
                self._op_began = time.time()
                if fn(*args) is not False:  # False: failed, and said so
                    self.outage.ended()
            except Exception as exc:  # noqa: BLE001 - logged; the trial goes on with its local copy
                self.outage.began(self._op_began)
                logger.warning(
                    "checkpoint replica %s: a background write failed: %s", self.url, exc
                )
            finally:
                self._op_began = None
                self._ops.task_done()

    def _drop(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """At the trial's end, with the store away: an upload or removal left undone."""
        why = "the store is unreachable at the trial's end"
        if fn == self._upload:
            staged, step, _ = args
            staged.unlink(missing_ok=True)
            self._slots.release()
            self.outage.skipped(step, why)
        elif fn == self._delete:
            logger.warning("checkpoint replica %s: a removal left undone: %s", self.url, why)

    def _list_known(self) -> None:
        found = self._list()
        with self._lock:
            assert self._known is not None
            self._known.update(found)

    def _upload(self, staged: Path, step: int, digest: str) -> bool:
        try:
            self.fs.put_file(str(staged), self.key(step))
            self.fs.pipe_file(self.key(step, ".sha256"), digest.encode())
            return True
        except Exception as exc:  # noqa: BLE001 - any store error: the step must not stay half-there
            logger.warning("could not upload checkpoint step %d to %s: %s", step, self.url, exc)
            self.outage.began(self._op_began)
            with self._lock:
                if self._known is not None:
                    self._known.discard(step)
            with contextlib.suppress(Exception):
                self._delete([step])
            return False
        finally:
            staged.unlink(missing_ok=True)
            self._slots.release()

    def _delete(self, steps: list[int]) -> None:
        keys = [self.key(s, suffix) for s in steps for suffix in (".sha256", ".pt")]
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(key)
