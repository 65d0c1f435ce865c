"""The control plane type-checks (mypy with the pydantic plugin, configured in pyproject)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long
def test_mypy_passes_on_the_control_plane() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"],  # incremental: .mypy_cache, as `make typecheck`
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
