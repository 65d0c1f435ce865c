"""Issue #50: a reported step that the storage cannot hold (beyond PostgreSQL's integer step
column, 2**31 - 1) or a negative one fails its trial with one clear reason, on SQLite and on
PostgreSQL alike, whether a program printed it or a function passed it to ``ctx.report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli

pytestmark = pytest.mark.slow

LINES = {
    "big": "step=99999999999 loss=0.5",
    "huge": "step=1e300 loss=0.5",
    "negative": "step=-5 loss=0.5",
    "fine": "step=2147483647 loss=0.5",
}
PROGRAM = f"""
import sys
lines = {LINES!r}
print(lines[sys.argv[sys.argv.index("--which") + 1]], flush=True)
"""
RANGE = "is outside 0..2147483647, the steps the storage holds; report a step in that range"


def run_sweep(tmp_path: Path, db_url: str, **changes: Any) -> dict[Any, Any]:
    """``hyperfleet sweep run`` of a grid sweep over ``which``; its trials by ``which``."""
    data = minimal_sweep(
        name="steps",
        storage=db_url,
        workdir=str(tmp_path / "runs"),
        scheduler={"type": "grid"},
        **changes,
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = cli("sweep", "run", str(path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    storage = Storage.open_readonly(db_url)
    try:
        return {t.params["which"]: t for t in storage.trials.of("steps")}
    finally:
        storage.close()


def test_a_programs_step_out_of_range_fails_its_trial(tmp_path: Path, db_url: str) -> None:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    trials = run_sweep(
        tmp_path,
        db_url,
        budget={"trials": 4, "max_concurrent": 2, "max_retries": 0},
        space={"which": {"type": "categorical", "choices": list(LINES)}},
        trial={"workload": None, "command": ["python", str(program), "${args}"], "steps": 1},
    )
    shown = {"big": "99999999999", "huge": "10000… (301 digits)", "negative": "-5"}
    for which, step in shown.items():
        t = trials[which]
        assert t.state == "FAIL", (which, t.state, t.error)
        last = (t.error or "").rstrip().splitlines()[-1]
        assert last == f"ScriptError: the program's report: step {step} {RANGE}", (which, t.error)
        assert "Background on this error" not in (t.error or "")
    assert trials["fine"].state == "COMPLETE", trials["fine"].error
    assert trials["fine"].last_step == 2**31 - 1


def test_a_functions_step_out_of_range_fails_its_trial(tmp_path: Path, db_url: str) -> None:
    steps = {"big": 99999999999, "negative": -5, "fine": 2**31 - 1}
    trials = run_sweep(
        tmp_path,
        db_url,
        budget={"trials": 3, "max_concurrent": 2, "max_retries": 0},
        space={"which": {"type": "categorical", "choices": list(steps)}},
        trial={"workload": "tests.faults.step_workload:main", "params": {"steps": steps}},
    )
    for which in ("big", "negative"):
        t = trials[which]
        assert t.state == "FAIL", (which, t.state, t.error)
        want = f"ReportValueError: ctx.report: step {steps[which]} {RANGE}"
        assert want in (t.error or ""), (which, t.error)
    assert trials["fine"].state == "COMPLETE", trials["fine"].error
