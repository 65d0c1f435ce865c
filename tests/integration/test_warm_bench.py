"""The side-by-side benchmark suite runs: its smallest case of every benchmark (hyperfleet's
contenders only; the peers' environments are the suite's own set-up) writes its figures.
Not a timing assertion: that the suite cannot rot. Marked long (a minute and a half of CPU):
``make test-long`` runs it, as CI does after ``make test``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli import ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_the_smallest_case_of_each_benchmark_writes_its_figures(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--smallest",
           "--no-markdown", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    raw = json.loads((tmp_path / "side_by_side-smallest.json").read_text())
    results = raw["results"]
    assert set(results) == {"overhead", "quickstart", "pbt", "growth"}
    assert set(results["overhead"]["per_trial"]) == {
        "hyperfleet warm", "hyperfleet cold (reuse: false)", "hyperfleet in-process"
    }  # fmt: skip
    assert results["quickstart"]["warm_over_cold"] > 0
    hf_pbt = results["pbt"]["runs"]["hyperfleet PBT (warm groups)"]
    assert hf_pbt["to_score"][0] is not None, "the PBT toy never reached its (tiny) score"
    assert results["growth"]["per_trial"]["hyperfleet in-process"]
    assert raw["machine"]["torch"]
