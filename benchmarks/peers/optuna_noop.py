"""Plain Optuna, benchmarks 1 and 4: N no-op trials that report R intermediate values,
``study.optimize(n_jobs=C)`` on a SQLite storage of its own.

python optuna_noop.py TRIALS REPORTS CONCURRENCY DB_PATH  ->  one JSON line: {"trials": n}
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    trials, reports, concurrency = (int(a) for a in sys.argv[1:4])
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{sys.argv[4]}", direction="maximize")

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_float("x", 0.0, 1.0)
        for step in range(1, reports + 1):
            trial.report(float(step), step)
        return float(reports)

    study.optimize(objective, n_trials=trials, n_jobs=concurrency)
    print(json.dumps({"trials": len(study.trials)}), flush=True)


if __name__ == "__main__":
    main()
