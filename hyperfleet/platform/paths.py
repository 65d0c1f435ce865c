"""Where a sweep keeps its files: one directory per trial under ``workdir/<sweep>/``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hyperfleet.spec.trial import replica_path
from hyperfleet.spec.wire import trial_dir

__all__ = ["checkpoint_dir", "replica_folder", "trial_dir"]


def checkpoint_dir(workdir: str | Path, sweep: str, number: int) -> Path:
    return trial_dir(workdir, sweep, number) / "checkpoints"


def replica_folder(root: str, sweep: str, created_at: float) -> Path:
    """The sweep's folder under the replica root ``checkpoint.replica`` (a directory or
    ``file://`` URI): ``<root>/<sweep>-<creation time, UTC>``, so two sweeps of the same name
    in different storages never share replicas, and every host names the same folder."""
    when = datetime.fromtimestamp(created_at, UTC)
    stamp = f"{when:%Y%m%dT%H%M%S}.{when.microsecond // 1000:03d}Z"  # ms: robust to float I/O
    return replica_path(root).resolve() / f"{sweep}-{stamp}"
