"""Whole sweeps in warm groups: trials that end early (pruned, paused, exploited) give their
devices back once, and the next trial runs in the group they left.

Real ``hyperfleet sweep run`` subprocesses on CPU slots. A lease released twice would stop the
controller (the pool asserts it), so a sweep that ends 0 with every ``hf_leases`` row closed
once, one per launch, is the check; the trials' logs show which ran in a group used before,
and hold one line per report after the sweep's temporary files are gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import ROOT, cli

pytestmark = pytest.mark.slow
REUSED = re.compile(r"# hyperfleet launch: warm group \d+ .*, trial ([2-9]|\d\d+) in it")
REPORT = re.compile(r"^report step (\d+): loss=\S+ .*-> (?:continue|prune)", re.M)


def leases_closed_once(storage: Storage, sweep: str) -> None:
    trials = storage.trials.of(sweep)
    leases = storage.leases.all(sweep)
    assert len(leases) == sum(t.attempts for t in trials), "a launch without its lease row"
    assert all(row.ended_at is not None and row.state for row in leases), leases


def reused(storage: Storage, sweep: str) -> int:
    """Launches that ran in a group an earlier trial had used."""
    return sum(len(REUSED.findall(Path(str(t.log_path)).read_text()))
               for t in storage.trials.of(sweep))  # fmt: skip


def test_pruned_trials_leave_their_group_to_the_next(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file(minimal_sweep(
        name="warm-prune",
        scheduler={"type": "random", "seed": 1},
        pruner={"type": "median", "n_startup_trials": 1, "n_warmup_steps": 2},
        budget={"trials": 6},
        trial={"steps": 8, "resources": {"devices": 1}, "parallel": {"data": 1}},
    ))  # fmt: skip
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"]
    assert counts["PRUNED"] >= 1 and counts["COMPLETE"] + counts["PRUNED"] == 6, counts
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    leases_closed_once(storage, "warm-prune")
    assert reused(storage, "warm-prune") >= 3, "trials did not run in warm groups"
    for t in storage.trials.of("warm-prune"):  # the sweep's temporary directory is gone by now
        text = Path(str(t.log_path)).read_text()
        steps = [int(s) for s in REPORT.findall(text)]
        assert steps == list(range(1, t.last_step + 1)), (t.number, text[-2000:])
        assert "hf-warm-" not in text, "a trial's log points at the launcher's temporary files"


def test_paused_and_exploiting_members_resume_in_warm_groups(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples" / "pbt_toy.yaml").read_text())
    data["scheduler"].update(
        population=3,
        perturbation_interval=4,
        quantile_fraction=0.5,  # of 3: the worst exploits the best
        initial=[*data["scheduler"]["initial"], {"h0": 0.5, "h1": 0.5}],
    )
    data["trial"]["steps"] = 24
    runs = tmp_path / "runs"
    data.update(name="warm-pbt", storage=f"sqlite:///{runs / 'hf.db'}", workdir=str(runs),
                tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}"})  # fmt: skip
    path = tmp_path / "pbt.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"]["COMPLETE"] == 3
    storage = Storage(f"sqlite:///{runs / 'hf.db'}")
    trials = storage.trials.of("warm-pbt")
    assert [t.last_step for t in trials] == [24] * 3
    assert any(t.attempts >= 2 for t in trials), "no member paused: nothing time-shared"
    events = SqlPopulationStore(storage.engine).lineage("warm-pbt")
    assert any(e.kind == "exploit" for e in events), "no member exploited"
    leases_closed_once(storage, "warm-pbt")
    assert reused(storage, "warm-pbt") >= 2, "paused members did not resume in warm groups"
