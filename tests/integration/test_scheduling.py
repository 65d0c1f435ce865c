"""Scheduling features through the platform: pruning across ranks, warm start, system knobs,
multi-objective Pareto fronts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.platform.storage import Storage
from tests.integration.cli import cli, invoke

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


QUADRATIC = {
    "objective": {"metric": "loss", "mode": "min"},
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    "trial": {
        "workload": "tests.integration.workloads:quadratic",
        "params": {},
        "steps": 40,
        "eval_every": 10,
        "resources": {"devices": 2},
        "parallel": {"data": 2},
    },
}


def test_pruned_trial_stops_on_every_rank_and_frees_its_devices(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file(
        {
            **QUADRATIC,
            "name": "pruning",
            "scheduler": {"type": "random", "seed": 0},
            "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
            # seed 0: trial 0 completes, 1 and 2 are pruned at step 10; 2 starts only once 1
            # gave its 2 devices back (the pool has 2)
            "budget": {"trials": 3, "max_concurrent": 1},
        }
    )
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"]
    assert counts["PRUNED"] >= 1 and counts["COMPLETE"] >= 1
    assert counts["COMPLETE"] + counts["PRUNED"] == 3  # each pruned trial gave its devices back
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    for t in storage.trials.of("pruning"):
        if t.state != "PRUNED":
            continue
        assert t.last_step < 40  # stopped at the report where it was pruned
        log = Path(t.log_path).read_text()
        for rank in (0, 1):
            assert f"[rank {rank}] hyperfleet.trial INFO: trial {t.number} pruned" in log


def test_enqueued_points_run_first(sweep_file: Callable[..., Path], tmp_path: Path) -> None:
    path = sweep_file(
        {
            **QUADRATIC,
            "name": "warm",
            "scheduler": {"type": "tpe", "seed": 0},
            "budget": {"trials": 4, "max_concurrent": 1},
            "trial": {
                **QUADRATIC["trial"],
                "steps": 10,
                "resources": {"devices": 0},
                "parallel": {"data": 1},
            },
        }
    )
    for x in (0.31, 0.77):
        q = invoke("sweep", "enqueue", str(path), "--params", json.dumps({"x": x}))
        assert q.exit_code == 0, q.output
    bad = invoke(
        "sweep",
        "enqueue",
        "warm",
        "--params",
        '{"x": 7}',
        "--storage",
        f"sqlite:///{tmp_path / 'runs' / 'hf.db'}",
    )
    assert bad.exit_code == 2 and "--params.x: 7 is outside [0.0, 1.0]" in bad.stderr
    proc = cli("sweep", "run", str(path), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    trials = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}").trials.of("warm")
    assert [t.params["x"] for t in trials[:2]] == [0.31, 0.77]
    assert len(trials) == 4 and all(t.state == "COMPLETE" for t in trials)
    # piped: one line per trial as it ends, before the results table
    lines = proc.stderr.splitlines()
    table = next(i for i, line in enumerate(lines) if line.strip() == "sweep warm")
    ended = [line for line in lines[:table] if line.startswith("trial ")]
    assert [line.split()[:3] for line in ended[:2]] == [
        ["trial", "0", "COMPLETE"], ["trial", "1", "COMPLETE"]
    ]  # fmt: skip
    assert len(ended) == 4 and "x=0.31" in ended[0] and ended[0].endswith("s"), ended
    storage = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    for label in ("Open MLflow:", "Open dashboard:"):  # a command on a line of its own
        command = lines[lines.index(label) + 1]
        assert command.startswith("  ") and f"--storage {storage}" in command, command
    listed = invoke("sweep", "list", "--storage", storage)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if " warm " in line)
    assert "loss min" in row and "4/4" in row and "done" in row.lower(), listed.stdout
    typo = invoke("sweep", "status", "wram", "--storage", storage)
    assert typo.exit_code == 2 and "did you mean 'warm'?" in typo.stderr, typo.stderr


def test_system_knob_breaking_the_layout_is_fail_with_reason(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file(
        {
            **QUADRATIC,
            "name": "knobs",
            "scheduler": {"type": "grid"},
            "budget": {"trials": 2, "max_concurrent": 1},
            "space": {
                "trial.parallel.data": {"type": "categorical", "choices": [1, 2]},
                "x": {"type": "categorical", "choices": [0.3]},
            },
            "trial": {
                **QUADRATIC["trial"],
                "steps": 10,
                "resources": {"devices": 1},
                "parallel": {"data": 1},
            },
        }
    )
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"] == {
        "COMPLETE": 1,
        "PRUNED": 0,
        "FAIL": 1,
    }
    trials = {
        t.params.get("trial.parallel.data"): t
        for t in Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}").trials.of("knobs")
    }
    failed = trials[2]
    assert failed.state == "FAIL" and "trial.resources.devices: 1 != parallel.data" in failed.error
    assert trials[1].state == "COMPLETE"


def test_unknown_knob_is_a_validation_error(sweep_file: Callable[..., Path]) -> None:
    path = sweep_file(
        {**QUADRATIC, "space": {"trial.precison": {"type": "categorical", "choices": ["bf16"]}}}
    )
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert "space.trial.precison: trial config has no key 'precison'" in result.stderr


def test_multi_objective_charlm_sweep_prints_a_pareto_front(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    """val_loss against tokens_per_s: bigger models learn more per step and run slower."""
    path = sweep_file(
        {
            "name": "pareto",
            "objective": None,
            "objectives": [
                {"metric": "val_loss", "mode": "min"},
                {"metric": "tokens_per_s", "mode": "max"},
            ],
            "scheduler": {"type": "grid"},
            "budget": {"trials": 6, "max_concurrent": 1},
            # widths far enough apart in compute that the measured speeds order them even on a
            # busy machine; 32-byte contexts and 30 steps keep the widest trial cheap
            "space": {
                "n_embd": {"type": "categorical", "choices": [8, 32, 128]},
                "n_layer": {"type": "categorical", "choices": [1, 2]},
            },
            "trial": {
                "workload": "charlm",
                "params": {
                    "corpus_bytes": 200_000,
                    "batch_size": 8,
                    "seq_len": 32,
                    "eval_batches": 2,
                },
                "steps": 30,
                "eval_every": 15,
                "resources": {"devices": 0},
                "parallel": {"data": 1},
            },
        }
    )
    text = path.read_text().replace("objective: null\n", "")
    path.write_text(text)
    proc = cli("sweep", "run", str(path), "--json", HYPERFLEET_CACHE=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state_counts"]["COMPLETE"] == 6
    front = result["pareto_front"]
    # how many widths make the front depends on speeds measured on a shared machine; what
    # must hold is a front of several trials, none of them dominating another
    assert len(front) >= 2
    losses_speeds = [(t["values"][0], t["values"][1]) for t in front]
    for loss, speed in losses_speeds:
        assert not any(
            lo <= loss and sp >= speed and (lo, sp) != (loss, speed) for lo, sp in losses_speeds
        )
    status = invoke(
        "sweep", "status", "pareto", "--storage", f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    )
    assert status.exit_code == 0, status.output
    assert "Pareto front" in status.stdout
    assert "n_embd=" in status.stdout and "{'n_embd'" not in status.stdout, "params, not dicts"
    for point in front:  # no front point is dominated by another
        for other in front:
            assert not (
                other["values"][0] < point["values"][0] and other["values"][1] > point["values"][1]
            )
