"""Optuna's GP sampler optimises its acquisition function in batches (``greenlet``, a
dependency), not one starting point after another with a warning in every GP sweep
(``benchmarks/bench_gp_greenlet.py``: 1.9x faster suggestions at 100 trials, idle)."""

from __future__ import annotations

import subprocess
import sys

SWEEP = """
import optuna
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.platform.config.scheduler_parsing import parse_scheduler_config

sampler = build_sampler(parse_scheduler_config({"type": "gp", "seed": 0, "n_startup_trials": 2}))
study = optuna.create_study(sampler=sampler)
study.optimize(lambda t: (t.suggest_float("x", -1, 1) - 0.2) ** 2, n_trials=4)
print("trials", len(study.trials))
"""


def test_gp_suggestions_are_batched_without_a_fallback_warning() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SWEEP], capture_output=True, text=True, timeout=120, check=True
    )
    assert "trials 4" in out.stdout
    assert "greenlet" not in out.stderr, out.stderr
