"""ASHA pruning on digits: the same sweep with and without the pruner, side by side.

Both sweeps run through the platform (``SweepRunner``, storage, MLflow) with in-process digits
trials and the same seeded random sampler, so they train the same configurations in the same
order; the pruned sweep stops the unpromising ones early at ASHA's rungs. Printed: the share of
trials pruned, the best val_accuracy of each, and the training steps each spent (the sum of
every trial's last step).

    python benchmarks/bench_pruning.py            # 30 trials of 300 steps each
    python benchmarks/bench_pruning.py --quick    # 16 trials of 200 steps
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.sweeps.run import SweepRunner


def sweep(root: Path, name: str, pruner: dict[str, Any], trials: int, steps: int) -> Any:
    return parse_sweep(
        {
            "name": name,
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "scheduler": {"type": "random", "seed": 7},
            "pruner": pruner,
            "budget": {"trials": trials, "max_concurrent": 2},
            "space": {
                "lr": {"type": "float", "low": 1e-4, "high": 3e-1, "log": True},
                "hidden": {"type": "int", "low": 8, "high": 128, "log": True},
            },
            "trial": {
                "workload": "digits",
                "params": {"batch_size": 64},
                "steps": steps,
                "eval_every": 25,
                "resources": {"devices": 0},
            },
            "storage": f"sqlite:///{root / 'hf.db'}",
            "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}"},
            "workdir": str(root),
        }
    )


def run(root: Path, name: str, pruner: dict[str, Any], trials: int, steps: int) -> dict[str, Any]:
    cfg = sweep(root, name, pruner, trials, steps)
    t0 = time.perf_counter()
    summary = SweepRunner(cfg, cfg.storage, cfg.tracking.uri).run()
    elapsed = time.perf_counter() - t0
    records = Storage(cfg.storage).trials.of(name)
    best = summary.best()
    return {
        "best": best.values[0] if best and best.values else float("nan"),
        "pruned": summary.state_counts["PRUNED"] / len(records),
        "steps": sum(t.last_step or 0 for t in records),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    trials, steps = (16, 200) if args.quick else (30, 300)
    asha = {"type": "asha", "min_resource": 25, "reduction_factor": 3}
    with tempfile.TemporaryDirectory(prefix="hf-bench-pruning-") as tmp:
        full = run(Path(tmp), "unpruned", {"type": "none"}, trials, steps)
        pruned = run(Path(tmp), "asha", asha, trials, steps)
    print(f"digits, {trials} trials x {steps} steps, random sampler (seed 7), in-process trials")
    print(f"{'sweep':<10}{'best val_acc':>14}{'pruned':>9}{'steps':>9}{'seconds':>9}")
    for name, r in (("unpruned", full), ("asha", pruned)):
        print(f"{name:<10}{r['best']:>14.4f}{r['pruned']:>9.0%}{r['steps']:>9}{r['seconds']:>9.1f}")
    gap = (full["best"] - pruned["best"]) / full["best"]
    print(
        f"asha/unpruned: best within {gap:.2%} (goal <= 1%), "
        f"steps {pruned['steps'] / full['steps']:.2f}x (goal <= 0.60), "
        f"pruned {pruned['pruned']:.0%} (goal >= 30%)"
    )


if __name__ == "__main__":
    main()
