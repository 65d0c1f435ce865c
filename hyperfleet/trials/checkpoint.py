"""Trial checkpoints: atomic, checksummed, the last ``keep`` retained.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts saved with ``torch.save``
and read back with ``torch.load(weights_only=True)``, so loading never runs pickled code. It is
written under a temporary name, flushed, fsynced and renamed into place: a crash mid-write
leaves the previous checkpoint intact. A SHA-256 of the file is stored beside it; a checkpoint
whose checksum doesn't match is skipped with a warning and the previous one is used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d{9})\.pt$")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointManager:
    """Checkpoints of one trial in ``directory``, named by step."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.pt"

    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write ``state`` as the checkpoint of ``step``; call on one rank only."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(step)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with tmp.open("wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        digest = _sha256(tmp)
        os.replace(tmp, path)
        _atomic_write_bytes(path.with_suffix(".sha256"), digest.encode())
        self._prune()
        return path

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            self.path(step).unlink(missing_ok=True)
            self.path(step).with_suffix(".sha256").unlink(missing_ok=True)

    def verify(self, step: int) -> bool:
        path = self.path(step)
        sums = path.with_suffix(".sha256")
        if not path.is_file() or not sums.is_file():
            return False
        return sums.read_text().strip() == _sha256(path)

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest intact checkpoint as ``(step, state)``, or None if there is none."""
        for step in reversed(self.steps()):
            if not self.verify(step):
                logger.warning("checkpoint %s is corrupt or incomplete; trying the previous one",
                               self.path(step))
                continue
            state = torch.load(self.path(step), map_location="cpu", weights_only=True)
            return step, state
        return None
