"""In-process trials run their torch on one CPU slot's share of the cores, as a torchrun
trial's rank does: two trials on two cores do not run four spinning OpenMP threads."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hyperfleet.platform.storage import Storage
from tests.integration.cli import cli


def test_inprocess_trials_take_a_cpu_slots_threads(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file({
        "name": "threads",
        "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"workload": "tests.launcher.workloads:threads", "steps": 1, "eval_every": 1,
                  "resources": {"devices": 0}, "parallel": {"data": 1}},
    })  # fmt: skip
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2", OMP_NUM_THREADS="")
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = max(1, (os.cpu_count() or 1) // 2)  # the pool's threads per process
    trials = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}").trials.of("threads")
    assert len(trials) == 2
    for t in trials:
        assert t.metrics["omp"] == expected, t.metrics
        assert t.metrics["threads"] == expected, t.metrics
