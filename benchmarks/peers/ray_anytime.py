"""Ray Tune on the anytime benchmark: ASHA with random search (Ray's documented default
pairing), ASHA with ``OptunaSearch``, or PBT; 2 CPUs, one per trial, stopped by
``time_budget_s``.

python ray_anytime.py WORKLOAD SEED BUDGET_S MODE  ->  one JSON line: {"best": value}
MODE: asha | asha-optuna | pbt. Every trial runs :func:`benchmarks.anytime_workloads.train`,
reporting once per evaluation (one ``training_iteration``); PBT members checkpoint at each.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import tempfile
from typing import Any


def ray_space(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A hyperfleet sweep file's space as Ray Tune's sampling domains."""
    from ray import tune

    out: dict[str, Any] = {}
    for name, d in space.items():
        if d["type"] == "float":
            out[name] = (tune.loguniform if d.get("log") else tune.uniform)(d["low"], d["high"])
        elif d["type"] == "int":  # randint's upper bound is exclusive
            out[name] = (tune.lograndint if d.get("log") else tune.randint)(d["low"], d["high"] + 1)
        else:
            out[name] = tune.choice(d["choices"])
    return out


def main() -> None:
    workload, seed, budget, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    from benchmarks.anytime_workloads import EVAL_EVERY, SPACES, STEPS, train

    def trainable(config: dict[str, Any]) -> None:
        state = None
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d, open(os.path.join(d, "state.pkl"), "rb") as f:
                state = pickle.load(f)

        def report(step: int, value: float, state_fn: Any) -> bool:
            if mode != "pbt":
                tune.report({"val_loss": value, "step": step})
                return True
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.pkl"), "wb") as f:
                    pickle.dump(state_fn(), f)
                tune.report({"val_loss": value, "step": step},
                            checkpoint=tune.Checkpoint.from_directory(d))  # fmt: skip
            return True

        train(workload, dict(config), report, state)

    space = ray_space(SPACES[workload])
    rungs = STEPS[workload] // EVAL_EVERY[workload]
    search_alg: Any = None
    if mode == "pbt":
        random.seed(seed)  # PBT's explore draws from Python's random (it takes no seed)
        scheduler: Any = PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=2,
            hyperparam_mutations={k: space[k] for k in ("lr", "weight_decay")},
        )  # fmt: skip
        samples = 4
    else:
        scheduler = ASHAScheduler(max_t=rungs)  # grace_period 1, reduction_factor 4: defaults
        samples = -1
        if mode == "asha-optuna":
            from ray.tune.search.optuna import OptunaSearch

            search_alg = OptunaSearch(seed=seed)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="val_loss", mode="min", scheduler=scheduler, search_alg=search_alg,
            num_samples=samples, time_budget_s=budget,
        ),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(prefix="ray-anytime-"),
                                  verbose=0),
    )  # fmt: skip
    results = tuner.fit()
    best = results.get_best_result(metric="val_loss", mode="min", scope="all")
    print(json.dumps({"best": best.metrics["val_loss"] if best else None}), flush=True)
    ray.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
