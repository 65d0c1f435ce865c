"""The control plane must not need torch: importing it never imports torch."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "hyperfleet",
    "hyperfleet.platform",
    "hyperfleet.platform.cli",
    "hyperfleet.platform.config",
    "hyperfleet.platform.sweeps.run",
    "hyperfleet.platform.storage",
    "hyperfleet.platform.pool",
    "hyperfleet.platform.launcher.torchrun",
    "hyperfleet.platform.launcher.inprocess",
    "hyperfleet.platform.launcher.simulated",
    "hyperfleet.platform.controller",
    "hyperfleet.platform.recorder",
    "hyperfleet.platform.tracking",
    "hyperfleet.platform.storage.results",
    "hyperfleet.platform.schedulers",
]


def test_platform_imports_without_torch() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + (
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
            "assert not bad, bad[:5]\n"
        )
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
