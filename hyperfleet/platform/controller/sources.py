"""What a controller serves, when it ends by itself, and what it reports as it goes.

A :class:`SweepSource` yields the sweeps a controller serves: :class:`FixedSweeps` (the one
of ``sweep run``, simulated sweeps), or the named or active sweeps of a storage (a fleet's
worker). :class:`Until` says when the controller ends by itself, and :class:`Progress` is
what it reports after each tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.storage import Storage


@dataclass(frozen=True)
class Progress:
    running: int
    finished: int
    budget: int | None

    @classmethod
    def of(cls, configs: list[SweepConfig], running: int, finished: int) -> Progress:
        """The progress of the sweeps of ``configs``; its budget only for one sweep."""
        budget = None
        if len(configs) == 1:
            cfg = configs[0]
            budget = int(cfg.scheduler.population) if cfg.is_population else cfg.budget.trials
        return cls(running, finished, budget)


class SweepSource(Protocol):
    @property
    def catalog(self) -> Storage | None:
        """Where the source reads which sweeps exist (None: it reads no storage); it waits
        out an outage as long as the sweeps served do."""

    def sessions(self, serving: set[str]) -> list[SweepSession]:
        """Open sessions of the active sweeps this controller should serve and does not
        (``serving`` are those it does)."""


class FixedSweeps:
    """The given open sessions, once (simulated sweeps)."""

    catalog: Storage | None = None

    def __init__(self, sessions: list[SweepSession]) -> None:
        self._new = list(sessions)

    def sessions(self, serving: set[str]) -> list[SweepSession]:
        new, self._new = self._new, []
        return new


@dataclass(frozen=True)
class Until:
    """When a controller ends by itself."""

    done: bool = True  # its sweeps are done (nothing left anywhere)
    idle: float | None = None  # no trial here for this long
    max_trials: int | None = None  # launched this many
