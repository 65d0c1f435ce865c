"""Schedulers: what to run next and whether a running trial goes on.

``build_scheduler`` rebuilds the sweep's scheduler from its config and storage in any process,
through the one table of schedulers keyed by their configuration class
(``config/registry.py``; the builders and ``build_scheduler`` in :mod:`.registry`).
"""

from __future__ import annotations

from hyperfleet.platform.schedulers.base import (
    Decision,
    DecisionKind,
    Scheduler,
    Suggestion,
    TrialState,
)
from hyperfleet.platform.schedulers.pbt.pinning import Pinned, PinsCheckpoints
from hyperfleet.platform.schedulers.registry import SCHEDULERS, build_scheduler, check_scheduler

__all__ = [
    "SCHEDULERS",
    "Decision",
    "DecisionKind",
    "Pinned",
    "PinsCheckpoints",
    "Scheduler",
    "Suggestion",
    "TrialState",
    "build_scheduler",
    "check_scheduler",
]
