"""Ray Tune, benchmark 3: Ray's own PBT example (``ray/tune/examples/pbt_example.py``, the
learning-rate triangle wave) as it ships, on 2 CPUs: population 8, perturbation interval 5,
``reuse_actors``; each member stops at ``done`` (accuracy > 200) or 1000 iterations.

python ray_pbt.py SCORE_FILE [POPULATION SCORE]  ->  one JSON line: {"best": accuracy}

Every member appends ``time accuracy`` to SCORE_FILE when it passes SCORE (200, as shipped;
smaller populations and scores are the suite's quick and smallest cases), so the harness reads
the time to the score the same way for Ray and for hyperfleet.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time


def main() -> None:
    score_file = sys.argv[1]
    population = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    score = float(sys.argv[3]) if len(sys.argv) > 3 else 200.0
    import ray
    from ray import tune
    from ray.tune.examples.pbt_example import PBTBenchmarkExample
    from ray.tune.schedulers import PopulationBasedTraining

    class Timed(PBTBenchmarkExample):
        def step(self) -> dict:
            out = super().step()
            out["done"] = out["mean_accuracy"] > score
            if out["done"]:
                with open(score_file, "a") as f:
                    f.write(f"{time.time()} {out['mean_accuracy']}\n")
            return out

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=5,
        hyperparam_mutations={
            "lr": lambda: random.uniform(0.0001, 0.02),
            "some_other_factor": [1, 2],
        },
    )
    tuner = tune.Tuner(
        Timed,
        run_config=tune.RunConfig(
            name="pbt",
            storage_path=tempfile.mkdtemp(prefix="ray-pbt-"),
            verbose=0,
            stop={"done": True, "training_iteration": 1000},
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=5, checkpoint_score_attribute="mean_accuracy", num_to_keep=4
            ),
        ),
        tune_config=tune.TuneConfig(
            scheduler=pbt,
            metric="mean_accuracy",
            mode="max",
            reuse_actors=True,
            num_samples=population,
        ),
        param_space={"lr": 0.0001, "some_other_factor": 1},
    )
    results = tuner.fit()
    best = results.get_best_result(metric="mean_accuracy", mode="max").metrics["mean_accuracy"]
    print(json.dumps({"best": best}), flush=True)
    ray.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
