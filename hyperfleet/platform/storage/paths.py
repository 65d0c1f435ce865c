"""Where a sweep keeps its files: one directory per trial under ``workdir/<sweep>/``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hyperfleet.spec.trial import replica_is_remote, replica_join, replica_path
from hyperfleet.spec.wire import trial_dir

__all__ = ["checkpoint_dir", "creation_stamp", "replica_folder", "sweep_replica", "trial_dir"]


def checkpoint_dir(workdir: str | Path, sweep: str, number: int) -> Path:
    return trial_dir(workdir, sweep, number) / "checkpoints"


def creation_stamp(created_at: float) -> str:
    """A sweep's creation time as it names the sweep: UTC, to the millisecond (robust to
    float I/O), e.g. ``20261204T231500.123Z``."""
    when = datetime.fromtimestamp(created_at, UTC)
    return f"{when:%Y%m%dT%H%M%S}.{when.microsecond // 1000:03d}Z"


def replica_folder(root: str, sweep: str, created_at: float) -> Path:
    """The sweep's folder under the replica root ``checkpoint.replica`` (a directory or
    ``file://`` URI): ``<root>/<sweep>-<creation time, UTC>``, so two sweeps of the same name
    in different storages never share replicas, and every host names the same folder."""
    return replica_path(root).resolve() / f"{sweep}-{creation_stamp(created_at)}"


def sweep_replica(root: str, sweep: str, created_at: float) -> str:
    """The sweep's replica location under ``root``: :func:`replica_folder` for a directory,
    ``<root>/<sweep>-<creation time, UTC>`` under an object store URL (``s3://bucket/prefix``)."""
    if replica_is_remote(root):
        return replica_join(root, f"{sweep}-{creation_stamp(created_at)}")
    return str(replica_folder(root, sweep, created_at))
