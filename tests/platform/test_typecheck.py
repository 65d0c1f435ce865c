"""The control plane type-checks (mypy with the pydantic plugin, configured in pyproject)."""

from __future__ import annotations

import pytest

from tests.integration.cli import python_module


@pytest.mark.long
def test_mypy_passes_on_the_control_plane() -> None:
    proc = python_module("mypy", timeout=600)  # incremental: .mypy_cache, as `make typecheck`
    assert proc.returncode == 0, proc.stdout[-4000:]
