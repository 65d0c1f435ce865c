"""Run a scheduler config against a known function and return the best value found.

The one place the tests turn a scheduler config into finished trials, two ways:
``direct_best_value`` drives the sampler built from the config through the ask/tell path the
platform's scheduler uses (``testfunctions.run_concurrent``, an in-memory study, milliseconds
of overhead a trial); ``best_value`` runs a real sweep through the platform (``SweepRunner``,
storage, MLflow) whose trials run in-process (``trial.resources.devices: 0``), about 0.5 s a
trial.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from pydantic import TypeAdapter

from hyperfleet.platform.config.schedulers import SchedulerConfig
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.testing.functions import KnownFunction, run_concurrent
from hyperfleet.testing.sweeps import minimal_sweep

_ADAPTER: TypeAdapter[Any] = TypeAdapter(SchedulerConfig)


def scheduler_config(raw: Mapping[str, Any]) -> Any:
    """A validated SchedulerConfig from a plain mapping (as in a sweep file)."""
    return _ADAPTER.validate_python(dict(raw))


def direct_best_value(cfg: Any, fn: KnownFunction, n_trials: int, concurrency: int = 1) -> float:
    """Minimise ``fn`` with the sampler of ``cfg``, ``concurrency`` trials in flight, the
    sampler told the budget as a sweep's is (``budget.trials``)."""
    study = optuna.create_study(sampler=build_sampler(cfg, n_trials=n_trials))
    return min(run_concurrent(study, fn, n_trials, concurrency, seed=cfg.seed or 0))


def sweep_config(
    cfg: Any, fn: KnownFunction, n_trials: int, root: Path, concurrency: int = 1
) -> Any:
    from hyperfleet.platform.config import parse_sweep

    return parse_sweep(
        minimal_sweep(
            name=f"{fn.name}-{cfg.type}",
            objective={"metric": "value"},
            scheduler=cfg.model_dump(),
            budget={"trials": n_trials, "max_concurrent": concurrency},
            space={
                f"x{i}": {"type": "float", "low": lo, "high": hi}
                for i, (lo, hi) in enumerate(fn.bounds)
            },
            trial={
                "workload": "hyperfleet.testing.functions:workload",
                "params": {"function": fn.name},
                "steps": 1,
            },
            storage=f"sqlite:///{root / 'hf.db'}",
            tracking={"uri": f"sqlite:///{root / 'mlflow.db'}"},
            workdir=str(root),
        )
    )


def best_value(cfg: Any, fn: KnownFunction, n_trials: int, concurrency: int = 1) -> float:
    """Minimise ``fn`` over its box with the scheduler ``cfg`` for ``n_trials`` trials."""
    from hyperfleet.platform.sweeps.run import SweepRunner

    with tempfile.TemporaryDirectory(prefix="hf-known-") as tmp:
        sweep = sweep_config(cfg, fn, n_trials, Path(tmp), concurrency)
        summary = SweepRunner(sweep, sweep.storage, sweep.tracking.uri).run()
        assert summary.state_counts["COMPLETE"] == n_trials, summary.state_counts
        best = summary.best()
        assert best is not None and best.values
        return float(best.values[0])
