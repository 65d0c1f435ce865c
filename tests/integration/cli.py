"""Running the ``hyperfleet`` command as a user would: a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: the repository on PYTHONPATH (tests' custom workloads)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def cli(
    *args: str, timeout: float = 900, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``hyperfleet ARGS`` in a subprocess; its exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=cli_env(**env),
    )
