"""Where a sweep keeps its files: one directory per trial under ``workdir/<sweep>/``."""

from __future__ import annotations

from pathlib import Path


def trial_dir(workdir: str | Path, sweep: str, number: int) -> Path:
    """``workdir/<sweep>/trial-NNNN`` (absolute): the trial's log, spec and checkpoints."""
    return (Path(workdir) / sweep / f"trial-{number:04d}").resolve()


def checkpoint_dir(workdir: str | Path, sweep: str, number: int) -> Path:
    return trial_dir(workdir, sweep, number) / "checkpoints"
