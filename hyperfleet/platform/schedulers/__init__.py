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

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.storage import Storage

__all__ = [
    "Decision",
    "DecisionKind",
    "Scheduler",
    "Suggestion",
    "TrialState",
    "build_scheduler",
]


def build_scheduler(cfg: SweepConfig, storage: Storage, create: bool = False) -> Scheduler:
    from hyperfleet.platform.schedulers.optuna_scheduler import OptunaScheduler, open_study

    return OptunaScheduler(cfg, open_study(cfg, storage.optuna, create=create))
