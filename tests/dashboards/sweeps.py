"""The real small sweeps the dashboard tests look at, run once per test session.

Five sweeps through the platform (``SweepRunner``: storage, scheduler, MLflow, in-process
trials of :func:`tests.dashboards.workloads.curve`) into one storage, each with its own MLflow
store (the dashboard finds each sweep's from its ``tracking.uri``). They run one after the
other: most of their cost is starting the in-process workers (importing torch, MLflow,
Optuna), which running them at once on two cores only makes slower.

* ``tpe-pruned`` — TPE with a median pruner, one trial at a time: COMPLETE and PRUNED trials;
* ``multi`` — NSGA-II on two objectives (loss and cost, both minimised);
* ``failing`` — every third trial raises half-way: FAIL trials with a traceback;
* ``pbt`` — a PBT population of 4 time-sharing 2 slots: exploits, explores, pauses;
* ``diverged`` — random search over a float and a categorical whose objective is named
  ``state`` and which reports ``lr`` beside the parameter ``lr``; two trials diverge to 1e13.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TPE, MULTI, FAILING, PBT = "tpe-pruned", "multi", "failing", "pbt"
DIVERGED = "diverged"
NAMES = (TPE, MULTI, FAILING, PBT, DIVERGED)
WORKLOAD = "tests.dashboards.workloads:curve"
#: the dashboard's entry script, as ``hyperfleet dashboard`` runs it
APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"


@dataclass(frozen=True)
class Filled:
    """Where the session's sweeps are."""

    root: Path
    storage: str
    tracking: dict[str, str]  # sweep -> its MLflow tracking URI
    mlflow_warnings: tuple[str, ...] = ()  # what MLflow's loggers warned while they ran


def write_sweep(root: Path, mlflow_template: Path, data: dict[str, Any]) -> Path:
    """``data`` as ``root/<name>.yaml``, its stores under ``root``: ``hf.db``, and ``mlflow.db``
    a copy of the session's migrated MLflow store."""
    shutil.copy(mlflow_template, root / "mlflow.db")
    stores = {
        "storage": f"sqlite:///{root / 'hf.db'}",
        "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}"},
    }
    path = root / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump({**data, **stores}))
    return path


def _trial(**changes: Any) -> dict[str, Any]:
    base = {"workload": WORKLOAD, "steps": 12, "eval_every": 2, "resources": {"devices": 0}}
    return {**base, **changes}


def configs(root: Path) -> list[dict[str, Any]]:
    """The five sweep files, as mappings."""
    space = {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "width": {"type": "int", "low": 16, "high": 256, "log": True},
    }

    def sweep(name: str, **changes: Any) -> dict[str, Any]:
        data = {
            "name": name,
            "objective": {"metric": "loss", "mode": "min"},
            "scheduler": {"type": "tpe", "seed": 0, "n_startup_trials": 4},
            "budget": {"trials": 10, "max_concurrent": 2},
            "space": space,
            "trial": _trial(),
            "storage": f"sqlite:///{root / 'hf.db'}",
            "tracking": {"uri": f"sqlite:///{root / f'mlflow-{name}.db'}", "log_model": False},
            "workdir": str(root),
        }
        data.update(changes)
        return {k: v for k, v in data.items() if v is not None}

    return [
        # one trial at a time: which trials the median pruner stops then depends on the seed
        # alone (trials 4, 8 and 9), not on how the machine times two trials against each other
        # (at two at a time a slower machine saw none pruned)
        sweep(
            TPE,
            scheduler={"type": "tpe", "seed": 0, "n_startup_trials": 5},
            budget={"trials": 10, "max_concurrent": 1},
            pruner={"type": "median", "n_startup_trials": 3, "n_warmup_steps": 4},
        ),
        sweep(
            MULTI,
            objective=None,
            objectives=[{"metric": "loss", "mode": "min"}, {"metric": "cost", "mode": "min"}],
            scheduler={"type": "nsga2", "seed": 0},
            budget={"trials": 8, "max_concurrent": 1},
        ),
        sweep(
            FAILING, budget={"trials": 6, "max_concurrent": 1}, trial=_trial(params={"fail_at": 3})
        ),
        sweep(
            PBT,
            scheduler={"type": "pbt", "population": 4, "perturbation_interval": 4, "seed": 0},
            budget={"max_concurrent": 2},
            trial=_trial(steps=24),
        ),
        sweep(
            DIVERGED,
            objective={"metric": "state", "mode": "min"},
            scheduler={"type": "random", "seed": 0},
            budget={"trials": 6, "max_concurrent": 1},
            space={
                "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                "opt": {"type": "categorical", "choices": ["sgd", "adam"]},
            },
            trial=_trial(workload="tests.dashboards.workloads:diverging", steps=4),
        ),
    ]


def run(root: Path, mlflow_template: Path) -> Filled:
    """Run the five sweeps, one after the other, into ``root``."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.sweeps.run import SweepRunner

    root.mkdir(parents=True, exist_ok=True)
    cfgs = [parse_sweep(c) for c in configs(root)]
    import mlflow  # noqa: F401 - its import sets up its loggers (dropping handlers added before)

    heard = _Heard(logging.WARNING)
    mlflow_logger = logging.getLogger("mlflow")
    mlflow_logger.addHandler(heard)
    try:
        for cfg in cfgs:
            shutil.copy(mlflow_template, root / f"mlflow-{cfg.name}.db")
            assert cfg.storage is not None and cfg.tracking.uri is not None
            SweepRunner(cfg, cfg.storage, cfg.tracking.uri).run()
    finally:
        mlflow_logger.removeHandler(heard)
    tracking = {c.name: str(c.tracking.uri) for c in cfgs}
    return Filled(root, str(cfgs[0].storage), tracking, tuple(heard.messages))


class _Heard(logging.Handler):
    """Keeps the messages of the records it gets."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
