"""Trial checkpoints: atomic, checksummed, replicated, the last ``keep`` retained.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts saved with ``torch.save``
and read back with ``torch.load(weights_only=True)``, so loading never runs pickled code; what
it holds is checked before it is written (NumPy values converted, other objects that loading
could not read refused with their key path: :mod:`hyperfleet.trials.values`). It is
written under a temporary name, flushed, fsynced and renamed into place: a crash mid-write
leaves the previous checkpoint intact. A SHA-256 of the file is stored beside it; a checkpoint
whose checksum doesn't match is skipped with a warning and the previous one is used.

Replication: with ``replica`` (a directory or a ``file://`` URI, for example on a shared file
system) every save is also copied there, again under a temporary name then renamed, with its
checksum. With an object store URL (``s3://bucket/prefix``, ``gs://``, ``az://``) it is
uploaded in the background instead, and downloads are verified
(:mod:`hyperfleet.trials.replica`); :meth:`CheckpointManager.close` waits for the uploads.
Restoring takes, newest step first, the primary copy if it is intact, else the replica's (and
copies it back to the primary); so deleting or corrupting the primary directory of a paused
trial, or losing its host, loses nothing.

RNG state: :func:`capture_rng_state` turns the Python, NumPy, torch CPU and CUDA generator
states into tensors and plain numbers (what ``weights_only`` loading accepts), and
:func:`restore_rng_state` puts them back, so dropout masks and shuffles continue exactly.

Configured by the trial's ``checkpoint:`` section (:class:`hyperfleet.spec.trial.CheckpointConfig`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hyperfleet.spec.trial import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    CheckpointConfig,
    replica_is_remote,
    replica_path,
)
from hyperfleet.trials.files import atomic_write_bytes, sha256_file
from hyperfleet.trials.replica import ObjectReplica, ReplicaChecksumError
from hyperfleet.trials.values import loadable

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d{9})\.pt$")


def _atomic_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    with src.open("rb") as fin, tmp.open("wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(tmp, dst)


class _Location:
    """One directory of ``step-NNNNNNNNN.pt`` files with their ``.sha256`` beside them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.pt"

    def steps(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def verify(self, step: int) -> bool:
        path = self.path(step)
        sums = path.with_suffix(".sha256")
        if not path.is_file() or not sums.is_file():
            return False
        return sums.read_text().strip() == sha256_file(path)

    def copy_from(self, other: _Location, step: int) -> None:
        src = other.path(step)
        _atomic_copy(src, self.path(step))
        _atomic_copy(src.with_suffix(".sha256"), self.path(step).with_suffix(".sha256"))

    def prune(self, keep: int, protected: Callable[[], Iterable[int]] | None = None) -> None:
        old = self.steps()[:-keep]
        if old and protected is not None:
            pinned = set(protected())
            old = [s for s in old if s not in pinned]
        self.remove(old)

    def remove(self, steps: Iterable[int]) -> None:
        for step in steps:
            self.path(step).unlink(missing_ok=True)
            self.path(step).with_suffix(".sha256").unlink(missing_ok=True)


class CheckpointManager:
    """Checkpoints of one trial in ``directory`` (and ``replica``), named by step."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keep: int = 2,
        replica: str | os.PathLike[str] | None = None,
        protect: Callable[[], Iterable[int] | None] | None = None,
        cache: bool = False,
        timeouts: tuple[float, float] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        notify: Callable[[str], None] | None = None,
    ) -> None:
        """``protect``: asked before pruning, the steps that must stay (older than the last
        ``keep``), e.g. a PBT member's checkpoint another member will still load; None when
        it cannot tell (its store is unreachable): then nothing is pruned. ``cache``: the
        directory is this host's copy of *another* trial's checkpoints (a PBT donor's), so an
        object store replica's copy of a step wins when its checksum differs (the donor may
        have written that step again elsewhere since). ``timeouts`` (connect, read) and
        ``notify`` (told of an object store's outage): see :class:`ObjectReplica`."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self._protect = protect
        self._cache = cache
        self._primary = _Location(self.directory)
        self._replica: _Location | ObjectReplica | None = None
        if replica is not None and replica_is_remote(replica):
            staging = self.directory / ".upload"
            self._replica = ObjectReplica(os.fspath(replica), staging, timeouts, notify)
        elif replica is not None:
            self._replica = _Location(replica_path(replica))

    @classmethod
    def from_config(
        cls, directory: str | os.PathLike[str], cfg: CheckpointConfig
    ) -> CheckpointManager:
        timeouts = (cfg.connect_timeout, cfg.read_timeout)
        return cls(directory, keep=cfg.keep, replica=cfg.replica, timeouts=timeouts)

    @property
    def replica(self) -> Path | str | None:
        """The replica's directory, or its object store URL."""
        return self._replica.directory if self._replica else None

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file in either location, oldest first."""
        found = set(self._primary.steps())
        if self._replica:
            found.update(self._replica.steps())
        return sorted(found)

    def path(self, step: int) -> Path:
        return self._primary.path(step)

    def save(self, step: int, state: Mapping[str, Any], prune: bool = True) -> Path:
        """Write ``state`` as the checkpoint of ``step``; call on one rank only. ``prune``:
        then drop the oldest beyond ``keep`` (else the caller calls :meth:`prune` later).

        Its contents are checked first (:func:`hyperfleet.trials.values.loadable`): NumPy
        values converted, anything ``torch.load(weights_only=True)`` cannot read refused with
        ``CheckpointContentError`` naming its key path, before any file is written."""
        import torch

        state = loadable(state)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(step)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with tmp.open("wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        digest = sha256_file(tmp)
        os.replace(tmp, path)
        atomic_write_bytes(path.with_suffix(".sha256"), digest.encode())
        if isinstance(self._replica, ObjectReplica):
            self._replica.put(path, step)  # uploaded in the background
        elif self._replica:
            try:
                self._replica.copy_from(self._primary, step)
            except OSError as exc:  # the trial goes on; the primary copy is intact
                logger.warning("could not replicate checkpoint %s: %s", path, exc)
                # an older copy of this step there (other weights) must not be restored
                with contextlib.suppress(OSError):
                    self._replica.remove([step])
        if prune:
            self.prune()
        return path

    def prune(self) -> None:
        """Drop the checkpoints beyond the newest ``keep``, in both locations, but those the
        ``protect`` callback names (asked at most once, and only if something would go)."""
        pinned: set[int] | None = None

        def protected() -> set[int]:
            nonlocal pinned
            if pinned is None:
                got = self._protect() if self._protect is not None else ()
                pinned = set(self.steps()) if got is None else set(got)
            return pinned

        self._primary.prune(self.keep, protected)
        if self._replica:
            with contextlib.suppress(OSError):
                self._replica.prune(self.keep, protected)

    def discard_after(self, step: int) -> None:
        """Delete every checkpoint newer than ``step``, in both locations (weights the trial
        gave up, e.g. for a PBT donor's: they must never be resumed from)."""
        newer = [s for s in self.steps() if s > step]
        for loc in (self._primary, self._replica):
            if loc is not None:
                loc.remove(newer)

    def verify(self, step: int, replica: bool = False) -> bool:
        """Whether the primary (or, with ``replica=True``, the replica) copy is intact."""
        loc = self._replica if replica else self._primary
        return loc is not None and loc.verify(step)

    def flush(self) -> None:
        """Wait for the replica's uploads in flight (an object store's; a directory's copies
        are made during the save)."""
        if isinstance(self._replica, ObjectReplica):
            self._replica.flush()

    def close(self) -> None:
        """:meth:`flush`, and end the replica's uploading thread (the trial's end)."""
        if isinstance(self._replica, ObjectReplica):
            self._replica.close()

    def _fetched(self, replica: ObjectReplica, step: int) -> _Location | None:
        """The primary copy of ``step`` downloaded from the object store, verified."""
        try:
            replica.fetch(step, self.path(step))
        except FileNotFoundError:
            return None
        except ReplicaChecksumError as exc:
            logger.warning("%s; using an older checkpoint", exc)
            return None
        except Exception as exc:  # noqa: BLE001 - any store error (an outage): an older step
            logger.warning("could not read checkpoint step %d from %s: %s", step, replica.url, exc)
            return None
        logger.warning(
            "checkpoint %s is missing or corrupt; using the replica in %s (downloaded, checksum "
            "verified)",
            self.path(step),
            replica.url,
        )
        return self._primary

    def _stale(self, replica: ObjectReplica, step: int) -> bool:
        """Whether this host's cached copy of ``step`` differs from the object store's."""
        if not self._cache:
            return False
        stored = replica.checksum(step)
        local = self.path(step).with_suffix(".sha256").read_text().strip()
        return stored is not None and stored != local

    def _intact(self, step: int) -> _Location | None:
        remote = self._replica if isinstance(self._replica, ObjectReplica) else None
        if self._primary.verify(step) and not (remote and self._stale(remote, step)):
            return self._primary
        if remote is not None:
            return self._fetched(remote, step)
        if self._replica and self._replica.verify(step):
            logger.warning(
                "checkpoint %s is missing or corrupt; using the replica in %s",
                self.path(step),
                self._replica.directory,
            )
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._primary.copy_from(self._replica, step)
            except OSError as exc:
                logger.warning("could not restore the primary copy from the replica: %s", exc)
            return self._replica
        return None

    def load(self, step: int) -> dict[str, Any]:
        """The checkpoint of ``step`` from an intact copy; FileNotFoundError if there is none."""
        import torch

        loc = self._intact(step)
        if loc is None:
            raise FileNotFoundError(f"no intact checkpoint of step {step} in {self.directory}")
        return torch.load(loc.path(step), map_location="cpu", weights_only=True)

    def latest_step(self) -> int | None:
        """The newest step with an intact copy (corrupt newer ones are skipped with a warning)."""
        for step in reversed(self.steps()):
            if self._intact(step) is not None:
                return step
            logger.warning(
                "checkpoint of step %d is corrupt or incomplete everywhere; trying the previous "
                "one",
                step,
            )
        return None

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest intact checkpoint as ``(step, state)``, or None if there is none."""
        step = self.latest_step()
        return None if step is None else (step, self.load(step))

    def load_at(self, step: int | None, wait: float = 0.0) -> tuple[int, dict[str, Any]] | None:
        """``(step, state)`` of ``step`` (None: the latest); if no copy of that step is
        intact, the latest one with a warning. ``wait``: seconds to wait for ``step`` to
        reach an object store replica when no copy is there yet (another host's upload of a
        PBT donor's checkpoint, still in flight)."""
        remote = self._replica if isinstance(self._replica, ObjectReplica) else None
        waits = step is not None and wait > 0 and remote is not None
        if waits and not self._primary.verify(step) and not remote.wait_for(step, wait):
            logger.warning(
                "checkpoint of step %d did not reach %s in %.0f s", step, remote.url, wait
            )
        if step is not None:
            try:
                return step, self.load(step)
            except FileNotFoundError:
                logger.warning(
                    "checkpoint of step %d in %s is gone; using the latest", step, self.directory
                )
        return self.load_latest()


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and CUDA generator states, as ``weights_only``-loadable values."""
    import torch

    version, mt, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {
        "python": {"version": version, "mt": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": list(cuda),
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back generator states captured by :func:`capture_rng_state`."""
    import torch

    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["mt"].tolist()), py["gauss"]))
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(cuda[i], i)
        if n < len(cuda):
            logger.warning("checkpoint holds %d CUDA RNG states, this host has %d", len(cuda), n)
