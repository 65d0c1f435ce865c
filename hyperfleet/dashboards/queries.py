"""The dashboard's reads: plain functions over a read-only :class:`Storage`, no Streamlit.

Every page asks for one of a few snapshots — the sweeps overview, one sweep's data, a PBT
population — each read in a handful of short queries (no transaction stays open, so a
running sweep's writers never wait on the dashboard, and SQLite's WAL lets them commit while
it reads). :mod:`hyperfleet.dashboards.state` caches the snapshots for a couple of seconds, so
any number of open browser tabs costs the database one read per snapshot per interval.

A population's members and lineage are read with the population store's plain reads
(:class:`~hyperfleet.platform.storage.population.SqlPopulationStore`: no lock, never waiting
for a running sweep) once into a :class:`PopulationSnapshot`, on which
:func:`~hyperfleet.platform.storage.population.replay_schedule` (a member's full schedule) runs
without touching the database again.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.errors import StorageError
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.space import CategoricalParam
from hyperfleet.platform.storage import LeaseRecord, Storage, TrialRecord, WorkerRecord
from hyperfleet.platform.storage.population import (
    LineageEvent,
    Member,
    replay_schedule,
)
from hyperfleet.platform.storage.results import SweepSummary, TrialSummary, no_sweep, summarize
from hyperfleet.spec.states import SweepStatus, TrialState

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
ACTIVE = (TrialState.RUNNING,)
LIVE = (
    SweepStatus.RUNNING,
    SweepStatus.SUBMITTED,
    SweepStatus.PAUSED,
)  # sweep statuses whose pages refresh: at work, or waiting for one (or for a resume)


@dataclass(frozen=True)
class SweepOverview:
    """One row of the Sweeps page."""

    name: str
    objective: str  # "loss (min)", or "loss (min), cost (min)"
    scheduler: str
    status: str
    done: int  # finished trials: COMPLETE, PRUNED or FAIL
    budget: int | None  # budget.trials, or the population size
    best: float | None  # single objective only
    running: int
    created_at: float
    devices: list[str]  # held now, as "host/device"
    pareto: int | None = None  # multi-objective: trials on the front


@dataclass(frozen=True)
class SweepData:
    """One sweep as the Sweep, Compare and Devices pages show it."""

    name: str
    config: SweepConfig
    status: str
    created_at: float
    updated_at: float
    experiment_id: str | None
    summary: SweepSummary
    records: dict[int, TrialRecord]
    leases: list[LeaseRecord]
    workers: list[WorkerRecord] = field(default_factory=list)  # those that held its leases
    fetched_at: float = field(default_factory=time.time)

    @property
    def metrics(self) -> list[str]:
        return self.summary.metrics

    @property
    def directions(self) -> list[str]:
        return self.summary.directions

    @property
    def multi_objective(self) -> bool:
        return len(self.summary.directions) > 1

    @property
    def scheduler(self) -> str:
        return str(self.config.scheduler.type)

    @property
    def is_population(self) -> bool:
        return self.config.is_population

    @property
    def space(self) -> dict[str, dict[str, Any]]:
        """Every dimension by name, those under a categorical's choices too (a categorical's
        ``choices`` as a list: a conditional one's sub-spaces are dimensions of their own)."""
        out = {}
        for name, spec in self.config.dims.items():
            dump = spec.model_dump(mode="json")
            if isinstance(spec, CategoricalParam):
                dump["choices"] = spec.values
            out[name] = dump
        return out

    @property
    def running(self) -> bool:
        """Running, or submitted and waiting for a worker: its pages refresh."""
        return self.status in LIVE

    def best(self) -> TrialSummary | None:
        return self.summary.best()

    def reported_metrics(self) -> list[str]:
        """Every metric some trial reported, the objectives first."""
        seen = dict.fromkeys(self.metrics)
        for t in self.summary.trials:
            seen.update(dict.fromkeys(sorted(t.metrics)))
        return list(seen)

    def fingerprint(self) -> str:
        """Changes exactly when a trial finishes or changes its final values: the key of
        derived results (importance, contour) that are only worth recomputing then."""
        h = hashlib.sha1()
        for t in self.summary.trials:
            if t.state in FINISHED:
                h.update(f"{t.number}:{t.state}:{t.values};".encode())
        return h.hexdigest()


@dataclass(frozen=True)
class PopulationData:
    """A PBT/PB2 population: its members as stored and every lineage event in order."""

    members: dict[int, Member]
    events: list[LineageEvent]
    schedules: dict[int, list[tuple[int, dict[str, Any]]]]  # member -> replayed schedule

    @property
    def exploits(self) -> list[LineageEvent]:
        return [e for e in self.events if e.kind == "exploit"]


def _objective_label(config: SweepConfig) -> str:
    return ", ".join(f"{o.metric} ({o.mode})" for o in config.all_objectives)


def budget(config: SweepConfig) -> int | None:
    """The trials the sweep may run: ``budget.trials``, or the population's size."""
    if config.is_population:
        return int(config.scheduler.population)
    return config.budget.trials


def overview(storage: Storage) -> list[SweepOverview]:
    """Every sweep in ``storage``, oldest first."""
    rows = []
    for sweep in storage.sweeps.all():
        summary = summarize(storage, sweep.name)
        config = sweep.parsed()
        counts = summary.state_counts
        best = summary.best()
        held = [
            f"{lease.host}/{device}"
            for lease in storage.leases.all(sweep.name)
            if lease.ended_at is None
            for device in lease.devices
        ]
        multi = len(summary.directions) > 1
        rows.append(
            SweepOverview(
                name=sweep.name,
                objective=_objective_label(config),
                scheduler=str(config.scheduler.type),
                status=sweep.status,
                done=sum(counts.get(s, 0) for s in FINISHED),
                budget=budget(config),
                best=best.values[0] if best is not None and best.values else None,
                running=counts.get(TrialState.RUNNING, 0),
                created_at=sweep.created_at,
                devices=held,
                pareto=len(summary.pareto_front()) if multi else None,
            )
        )
    return rows


def sweep_data(storage: Storage, name: str) -> SweepData:
    """One sweep's configuration, summary, trial rows, leases and the workers that held them.

    ``StorageError`` (one line) when the storage holds no sweep ``name``.
    """
    row = storage.sweeps.get(name)
    if row is None:
        raise StorageError(no_sweep(name, [r.name for r in storage.sweeps.all()]))
    records = storage.trials.of(name)
    summary = summarize(storage, name, records=records)  # the rows the page shows
    leases = storage.leases.all(name)
    held = {lease.worker for lease in leases}
    return SweepData(
        name=name,
        config=row.parsed(),
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
        experiment_id=row.mlflow_experiment_id,
        summary=summary,
        records={t.number: t for t in records},
        leases=leases,
        workers=[w for w in storage.workers.all() if w.id in held],
    )


class PopulationSnapshot:
    """A population as read at one moment, on which :func:`replay_schedule` (a member's full
    schedule) runs without touching the database again."""

    def __init__(self, sweep: str, members: dict[int, Member], events: list[LineageEvent]):
        self.sweep = sweep
        self._members = members
        self._events = events

    def members(self, sweep: str) -> dict[int, Member]:
        return dict(self._members) if sweep == self.sweep else {}

    def lineage(self, sweep: str, member: int | None = None) -> list[LineageEvent]:
        if sweep != self.sweep:
            return []
        return [e for e in self._events if member is None or e.member == member]


def population(storage: Storage, name: str) -> PopulationData:
    """The members, lineage and every member's replayed hyperparameter schedule, read in two
    queries that never wait for a running sweep (see the module docstring)."""
    store = storage.population
    members, events = store.members(name), store.lineage(name)
    snapshot = PopulationSnapshot(name, members, events)
    schedules = {n: replay_schedule(snapshot, name, n) for n in members}
    return PopulationData(members=members, events=events, schedules=schedules)
