"""Plain Optuna on the anytime benchmark: TPE with its Hyperband pruner, ``n_jobs=2``.

What a user of Optuna alone writes: ``TPESampler(seed)``, ``HyperbandPruner()`` with its
defaults, ``study.optimize(objective, n_jobs=2, timeout=budget)`` in one process (two threads,
each trial's torch on one intra-op thread), an in-memory study.

python optuna_anytime.py WORKLOAD SEED BUDGET_S  ->  one JSON line: {"best": value, "trials": n}
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The space of a hyperfleet sweep file through Optuna's ``suggest_*``."""
    out: dict[str, Any] = {}
    for name, d in space.items():
        if d["type"] == "float":
            out[name] = trial.suggest_float(name, d["low"], d["high"], log=d.get("log", False))
        elif d["type"] == "int":
            out[name] = trial.suggest_int(name, d["low"], d["high"], log=d.get("log", False))
        else:
            out[name] = trial.suggest_categorical(name, d["choices"])
    return out


def main() -> None:
    workload, seed, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    import optuna

    from benchmarks.anytime_workloads import SPACES, train

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, SPACES[workload])

        def report(step: int, value: float, _state: Any) -> bool:
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
            return True

        return train(workload, params, report)

    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(),
    )
    study.optimize(objective, n_jobs=2, timeout=budget)
    print(json.dumps({"best": study.best_value, "trials": len(study.trials)}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
