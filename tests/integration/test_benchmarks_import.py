"""Every benchmark script imports against the package as it is: a renamed or moved name
breaks ``make bench`` at once here, not after minutes of benchmarking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IMPORT_ALL = """
import importlib, pathlib, sys
sys.path.insert(0, {root!r})
failed = []
for p in sorted(pathlib.Path({root!r}, "benchmarks").glob("*.py")):
    try:
        importlib.import_module("benchmarks." + p.stem)
    except Exception as exc:
        failed.append(f"{{p.name}}: {{type(exc).__name__}}: {{exc}}")
print("\\n".join(failed) or "all imported")
"""


def test_every_benchmark_script_imports() -> None:
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 20
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL.format(root=str(ROOT))],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "all imported", out.stdout
