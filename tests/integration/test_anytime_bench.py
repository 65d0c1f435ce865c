"""The anytime benchmark runs: its smallest case (hyperfleet's TPE with ASHA and plain Optuna's
TPE with Hyperband on the digits MLP, one seed, 45 s each) writes its table, its raw runs and
its plot. Not a timing assertion: that the benchmark cannot rot. Marked long (about 110 s of
wall time): ``make test-long`` runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli import ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_the_smallest_anytime_case_writes_its_figures(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_anytime.py"), "--size", "smallest",
           "--out", str(tmp_path)]  # fmt: skip
    env = cli_env(ANYTIME_SCRATCH=str(tmp_path))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    raw = json.loads((tmp_path / "anytime-smallest.json").read_text())
    digits = raw["workloads"]["digits"]
    assert set(digits["runs"]) == {"hf-tpe-asha", "optuna-tpe-hyperband"}
    for name, runs in digits["runs"].items():
        points = runs[0]
        assert points, f"{name}: no evaluation within the budget"
        assert all(0 < t <= digits["budget_s"] for t, _ in points)
        assert 0 < min(v for _, v in points) < 2.3, name  # below chance (ln 10) for 10 classes
    assert digits["target"] is not None
    assert (tmp_path / "anytime-smallest-digits.png").stat().st_size > 10_000
    assert "| hf-tpe-asha (recommended) |" in (tmp_path / "anytime-smallest.md").read_text()
