"""Removing a sweep from storage (``storage.removal``): every ``hf_*`` row that names it and
its Optuna study, so that its name is free again (a ``sweep run`` of the same name starts
afresh, with a new creation time and so a new identity).

A sweep is named by ``hf_sweeps.name`` and by the ``sweep`` column of ``hf_trials``,
``hf_leases``, ``hf_gangs``, ``hf_ahead`` and PBT's ``hf_pbt_populations``,
``hf_pbt_members`` and ``hf_lineage`` (:data:`SWEEP_TABLES`); ``hf_workers`` rows belong to
worker processes, not to sweeps, and stay. Optuna's study (``hf_sweeps.study_name``) is
deleted through Optuna's own ``delete_study``, which removes its trials, params and values.

:meth:`SweepRemoval.serving` says who serves the sweep right now: its RUNNING trials whose
heartbeat is live (younger than ``stale_after``), and the live workers started for it alone
(``sweep run``, ``worker --sweep NAME``). A sweep they serve is not removed: its trials
would go on writing to rows that are gone. A RUNNING trial whose heartbeat is stale has lost
its worker; it serves nobody.

:meth:`SweepRemoval.remove` deletes the study first, then every row in one transaction, the
sweep's own row last: interrupted between the two, the sweep is still listed and removing it
again finishes (a study already gone is no error). A table an older database lacks is
skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

import sqlalchemy as sa

from hyperfleet.platform.storage.part import Basics, Part
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import (
    GangRow,
    LeaseRow,
    SweepRow,
    TrialRow,
    WorkerRow,
    ahead_table,
    lineage_table,
    members_table,
    populations_table,
)
from hyperfleet.spec.states import TrialState, WorkerState

#: every table with a row per sweep or per trial of one, by the column that names the sweep
#: (``hf_sweeps`` comes last: :meth:`SweepRemoval.remove`)
SWEEP_TABLES: tuple[tuple[sa.Table, str], ...] = (
    (cast(sa.Table, TrialRow.__table__), "sweep"),
    (cast(sa.Table, LeaseRow.__table__), "sweep"),
    (cast(sa.Table, GangRow.__table__), "sweep"),
    (ahead_table, "sweep"),
    (populations_table, "sweep"),
    (members_table, "sweep"),
    (lineage_table, "sweep"),
    (cast(sa.Table, SweepRow.__table__), "name"),
)


class WithStudies(Basics, Protocol):
    """A storage with Optuna's RDB storage beside its tables (:class:`~.store.Storage`)."""

    @property
    def optuna(self) -> Any: ...


@dataclass(frozen=True)
class Serving:
    """Who serves a sweep right now: ``(trial number, worker, host)`` of each RUNNING trial
    with a live heartbeat, and ``(worker id, host, pid)`` of each live worker started for
    this sweep alone."""

    trials: tuple[tuple[int, str | None, str | None], ...]
    workers: tuple[tuple[str, str, int], ...]

    def __bool__(self) -> bool:
        return bool(self.trials or self.workers)

    def describe(self) -> str:
        """``2 trials running (trial 3 on host-a, ...)`` or the worker that serves it."""
        if self.trials:
            shown = ", ".join(f"trial {n} on {host or worker or 'a worker'}"
                              for n, worker, host in self.trials[:3])  # fmt: skip
            more = ", ..." if len(self.trials) > 3 else ""
            count = len(self.trials)
            return f"{count} trial{'s' if count > 1 else ''} running ({shown}{more})"
        worker, host, pid = self.workers[0]
        return f"worker {worker} on {host} (pid {pid}) serves it"


@dataclass(frozen=True)
class Removed:
    """What :meth:`SweepRemoval.remove` deleted: rows by table, and whether a study was."""

    rows: dict[str, int]
    study: bool


class SweepRemoval(Part):
    """Find who serves a sweep, and remove the sweep's rows and study (module docstring)."""

    def __init__(self, storage: WithStudies) -> None:
        super().__init__(storage)
        self.studies = storage

    @retried
    def serving(self, name: str, stale_after: float) -> Serving:
        """The trials and dedicated workers serving sweep ``name`` now (module docstring)."""
        since = self.now() - stale_after
        trials = cast(sa.Table, TrialRow.__table__)
        workers = cast(sa.Table, WorkerRow.__table__)
        running = (
            sa.select(trials.c.number, trials.c.worker, trials.c.host)
            .where(trials.c.sweep == name, trials.c.state == TrialState.RUNNING)
            .where(trials.c.heartbeat_at >= since)
            .order_by(trials.c.number)
        )
        live = sa.select(workers.c.id, workers.c.host, workers.c.pid, workers.c.sweeps).where(
            workers.c.state == WorkerState.ACTIVE, workers.c.heartbeat_at >= since
        )
        with self.session() as s:
            present = sa.inspect(s.connection())
            found = list(s.execute(running)) if present.has_table(trials.name) else []
            held = list(s.execute(live)) if present.has_table(workers.name) else []
        return Serving(
            trials=tuple((int(n), w, h) for n, w, h in found),
            workers=tuple((str(i), str(h), int(p)) for i, h, p, sweeps in held
                          if sweeps is not None and name in sweeps),
        )  # fmt: skip

    def remove(self, name: str) -> Removed:
        """Delete sweep ``name``'s Optuna study, then every row naming it (module docstring)."""
        study = self._drop_study(name)
        return Removed(rows=self._drop_rows(name), study=study)

    @retried
    def _drop_study(self, name: str) -> bool:
        with self.session() as s:
            study_name = s.scalar(sa.select(SweepRow.study_name).where(SweepRow.name == name))
            has_studies = sa.inspect(s.connection()).has_table("studies")
        if not has_studies:  # a PBT-only database: Optuna's tables were never made
            return False
        rdb = self.studies.optuna
        try:
            study_id = rdb.get_study_id_from_name(study_name or name)
        except KeyError:  # never made, or deleted by an earlier removal
            return False
        rdb.delete_study(study_id)
        return True

    @retried
    def _drop_rows(self, name: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self.session() as s:
            present = sa.inspect(s.connection())
            for table, column in SWEEP_TABLES:
                if not present.has_table(table.name):
                    continue  # an older database without it
                deleted = s.execute(sa.delete(table).where(table.c[column] == name))
                counts[table.name] = int(cast(sa.CursorResult[Any], deleted).rowcount or 0)
        return counts
