"""SMAC3 on the anytime benchmark: its multi-fidelity facade (Hyperband over a random-forest
model, BOHB's successor) with training steps as the fidelity, two workers (Dask), stopped by
``walltime_limit``.

python smac_anytime.py WORKLOAD SEED BUDGET_S  ->  one JSON line: {"best": value}
SMAC asks for a configuration at a budget of steps and trains it from scratch to that budget
(it does not continue a trial), as its facade is meant to be used.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any


def config_space(space: dict[str, dict[str, Any]], seed: int) -> Any:
    """A hyperfleet sweep file's space as a ConfigSpace ``ConfigurationSpace``."""
    from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer

    cs = ConfigurationSpace(seed=seed)
    for name, d in space.items():
        if d["type"] == "float":
            cs.add(Float(name, (d["low"], d["high"]), log=d.get("log", False)))
        elif d["type"] == "int":
            cs.add(Integer(name, (d["low"], d["high"]), log=d.get("log", False)))
        else:
            cs.add(Categorical(name, d["choices"]))
    return cs


def main() -> None:
    workload, seed, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    from smac import MultiFidelityFacade, Scenario

    from benchmarks.anytime_workloads import EVAL_EVERY, SPACES, STEPS

    def target(config: Any, seed: int = 0, budget: float | None = None) -> float:
        from benchmarks.anytime_workloads import STEPS, train

        steps = round(budget) if budget else STEPS[workload]
        return train(workload, dict(config), lambda *_: True, steps=steps)

    scenario = Scenario(
        config_space(SPACES[workload], seed), deterministic=True, walltime_limit=budget,
        n_trials=100_000, min_budget=EVAL_EVERY[workload], max_budget=STEPS[workload],
        n_workers=2, seed=seed, output_directory=tempfile.mkdtemp(prefix="smac-anytime-"),
    )  # fmt: skip
    smac = MultiFidelityFacade(scenario, target, overwrite=True, logging_level=40)
    incumbent = smac.optimize()
    best = smac.runhistory.get_cost(incumbent) if incumbent is not None else None
    print(json.dumps({"best": best}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
