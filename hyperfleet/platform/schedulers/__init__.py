"""Schedulers: what to run next and whether a running trial goes on.

``build_scheduler`` rebuilds the sweep's scheduler from its config and storage in any process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperfleet.platform.schedulers.base import (
    Decision,
    DecisionKind,
    Scheduler,
    Suggestion,
    TrialState,
)
from hyperfleet.platform.schedulers.pbt.pinning import Pinned, PinsCheckpoints

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.storage import Storage

__all__ = [
    "Decision",
    "DecisionKind",
    "Pinned",
    "PinsCheckpoints",
    "Scheduler",
    "Suggestion",
    "TrialState",
    "build_scheduler",
]


def build_scheduler(cfg: SweepConfig, storage: Storage, create: bool = False) -> Scheduler:
    """The sweep's scheduler, its state in ``storage`` (``create``: make the study if new)."""
    if cfg.is_population:
        from hyperfleet.platform.schedulers.pbt.pb2 import PB2Scheduler
        from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler
        from hyperfleet.platform.storage.population import SqlPopulationStore

        cls = PB2Scheduler if cfg.scheduler.type == "pb2" else PBTScheduler
        return cls(
            cfg.scheduler,  # type: ignore[arg-type]
            store=SqlPopulationStore(storage.engine),
            sweep=cfg.name,
            space={name: spec.model_dump() for name, spec in cfg.space.items()},
            metric=cfg.all_objectives[0].metric,
            mode=cfg.all_objectives[0].mode,
            max_steps=cfg.trial.steps,
            max_concurrent=cfg.budget.max_concurrent,
        )
    from hyperfleet.platform.schedulers.optuna.scheduler import OptunaScheduler, open_study

    return OptunaScheduler(cfg, open_study(cfg, storage.optuna, create=create))
