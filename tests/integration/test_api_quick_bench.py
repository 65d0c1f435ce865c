"""``benchmarks/bench_api_quick.py --quick`` runs both contenders on both objectives and prints
its table: that the benchmark cannot rot, not a timing assertion (marked long, as the other
benchmarks' smallest runs are)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.cli import ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_the_quick_run_prints_a_row_per_objective_and_contender() -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_api_quick.py"), "--quick"]
    proc = subprocess.run(cmd, cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in rows[0]] == [
        "objective", "trials", "contender", "wall s", "to first trial s", "per trial s",
        "caller's CPU s", "/ study.optimize",
    ]  # fmt: skip
    body = [[c.strip() for c in row] for row in rows[1:] if not row[0].startswith(" ---")]
    assert [(r[0], r[1], r[2]) for r in body] == [
        (objective, "6", contender)
        for objective in ("5 ms function", "digits SGDClassifier")
        for contender in ("hyperfleet.run", "study.optimize")
    ]
    for row in body:
        wall, first = float(row[3]), float(row[4])
        assert 0 < first < wall, row  # the first trial started inside the timed call
        assert row[5].endswith(" ms") and float(row[6]) > 0 and float(row[7]) > 0
    assert [row[7] for row in body if row[2] == "study.optimize"] == ["1.00", "1.00"]
