"""Ray Tune, benchmark 1: N no-op trials that report R times, ``Tuner.fit`` at concurrency C.

python ray_noop.py TRIALS REPORTS CONCURRENCY  ->  one JSON line: {"trials": n}
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main() -> None:
    trials, reports, concurrency = (int(a) for a in sys.argv[1:4])
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    from ray import tune

    def noop(config: dict) -> None:
        for step in range(1, reports + 1):
            tune.report({"score": float(step)})

    ray.init(num_cpus=concurrency, include_dashboard=False, log_to_driver=False)
    tuner = tune.Tuner(
        tune.with_resources(noop, {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(
            num_samples=trials, max_concurrent_trials=concurrency, metric="score", mode="max"
        ),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(prefix="ray-bench-"), verbose=0),
    )
    results = tuner.fit()
    print(json.dumps({"trials": len(results), "errors": results.num_errors}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
