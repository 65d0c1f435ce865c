"""Suggestion time per trial against history size, for tpe, gp and skopt side by side.

For each history size the study is pre-filled with that many finished Hartmann-6 trials
(random points, ``study.add_trials``), then each sampler is timed on ``ask`` plus the six
``suggest_float`` calls (where the model is fitted and the acquisition optimised), followed by
``tell``. Prints seconds per suggestion and the ratio to TPE at the same size.

    python benchmarks/bench_suggest.py            # sizes 10, 100, 500; 3 asks each
    python benchmarks/bench_suggest.py --quick    # 1 ask each, no lbfgs row (< 60 s)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import optuna

from hyperfleet.platform.config.scheduler_parsing import parse_scheduler_config
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.testing.functions import HARTMANN6

SAMPLERS: dict[str, dict[str, Any]] = {
    "tpe": {"type": "tpe"},
    "gp": {"type": "gp"},
    "skopt GP (sampling)": {"type": "skopt", "acq_optimizer": "sampling"},
    "skopt GP (lbfgs)": {"type": "skopt"},
    "skopt GP max_history=100": {"type": "skopt", "acq_optimizer": "sampling", "max_history": 100},
}
DIST = optuna.distributions.FloatDistribution(0.0, 1.0)


def history(n: int, seed: int = 0) -> list[optuna.trial.FrozenTrial]:
    rng = np.random.default_rng(seed)
    trials = []
    for _ in range(n):
        x = rng.random(6)
        trials.append(
            optuna.trial.create_trial(
                params={f"x{i}": float(v) for i, v in enumerate(x)},
                distributions={f"x{i}": DIST for i in range(6)},
                value=HARTMANN6.fn(x),
            )
        )
    return trials


def time_suggestions(raw: dict[str, Any], prefill: list[optuna.trial.FrozenTrial], k: int) -> float:
    study = optuna.create_study(sampler=build_sampler(parse_scheduler_config({**raw, "seed": 0})))
    study.add_trials(prefill)
    warm = study.ask()  # imports (torch, skopt) and caches are not part of the cost
    study.tell(warm, HARTMANN6.fn([warm.suggest_float(f"x{i}", 0.0, 1.0) for i in range(6)]))
    times = []
    for _ in range(k):
        start = time.perf_counter()
        trial = study.ask()
        x = [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(6)]
        times.append(time.perf_counter() - start)
        study.tell(trial, HARTMANN6.fn(x))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one ask per cell, skip the slow lbfgs row"
    )
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sizes = (10, 100, 500)
    k = 1 if args.quick else 3
    names = (
        list(SAMPLERS)
        if not args.quick
        else ["tpe", "gp", "skopt GP (sampling)", "skopt GP max_history=100"]
    )
    table = {
        name: {n: time_suggestions(SAMPLERS[name], history(n), k) for n in sizes} for name in names
    }
    print(f"seconds per suggestion (median of {k}), 6-D Hartmann history; ratio to tpe")
    print(f"{'sampler':<26}" + "".join(f"{f'n={n}':>22}" for n in sizes))
    for name, row in table.items():
        cells = "".join(f"{row[n]:>10.4f}s {row[n] / table['tpe'][n]:>8.1f}x" for n in sizes)
        print(f"{name:<26}{cells}")
    for name, row in table.items():
        print(f"{name}: n={sizes[-1]} costs {row[sizes[-1]] / row[sizes[0]]:.1f}x n={sizes[0]}")


if __name__ == "__main__":
    main()
