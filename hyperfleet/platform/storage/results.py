"""Read-side summaries of a sweep, shared by ``sweep run``, ``sweep status`` and the dashboard.

They read the platform's own trial table, which every scheduler fills the same way (Optuna's
samplers and PBT alike): state, params, the last report's metrics, timings and errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.suggest import did_you_mean
from hyperfleet.platform.storage import Storage, SweepRecord, TrialRecord
from hyperfleet.platform.storage.failures import alike_failures, reason, stop_line
from hyperfleet.spec.states import TrialState

ENDINGS = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
"""The states a trial ends in for good, in the order counts show them."""


@dataclass(frozen=True)
class TrialSummary:
    number: int
    state: str
    values: list[float] | None
    params: dict[str, Any]
    duration_s: float | None
    last_step: int | None
    error: str | None
    metrics: dict[str, Any] = field(default_factory=dict)
    worker: str | None = None
    host: str | None = None
    notes: str | None = None
    started_at: float | None = None  # the latest launch's start (wall clock)


@dataclass(frozen=True)
class SweepSummary:
    sweep: str
    metrics: list[str]
    directions: list[str]  # "maximize" | "minimize", one per objective
    trials: list[TrialSummary]  # empty where the trials were only counted (:func:`counted`)
    experiment_id: str | None = None
    parent_run_id: str | None = None
    interrupted: bool = False
    counts: dict[str, int] | None = None  # by state, where only counted
    stopped: str | None = None  # why it stopped before its budget (alike failures), one line
    stop_cause: str | None = None  # then the failure line its first trials shared

    @property
    def state_counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(ENDINGS, 0)
        counts.update(
            self.counts if self.counts is not None else Counter(t.state for t in self.trials)
        )
        return counts

    def _key(self, t: TrialSummary) -> list[float]:
        assert t.values is not None
        return [
            -v if d == "maximize" else v for v, d in zip(t.values, self.directions, strict=True)
        ]

    def best(self) -> TrialSummary | None:
        """The best COMPLETE trial (single objective only)."""
        if len(self.directions) != 1:
            return None
        done = [t for t in self.trials if t.state == TrialState.COMPLETE and t.values]
        return min(done, key=self._key) if done else None

    def pareto_front(self) -> list[TrialSummary]:
        """COMPLETE trials that no other COMPLETE trial dominates."""
        done = [t for t in self.trials if t.state == TrialState.COMPLETE and t.values]
        keys = {t.number: self._key(t) for t in done}

        def dominated(a: TrialSummary) -> bool:
            ka = keys[a.number]
            return any(
                all(x <= y for x, y in zip(keys[b.number], ka, strict=True))
                and keys[b.number] != ka
                for b in done
            )

        return [t for t in done if not dominated(t)]

    def to_json(self) -> dict[str, Any]:
        best = self.best()
        data: dict[str, Any] = {
            "sweep": self.sweep,
            "state_counts": self.state_counts,
            "best": None
            if best is None or not best.values
            else {"number": best.number, "value": best.values[0], "params": best.params},
            "mlflow": {"experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id},
            "interrupted": self.interrupted,
            "stopped": self.stopped,
        }
        if len(self.directions) > 1:
            data["pareto_front"] = [
                {"number": t.number, "values": t.values, "params": t.params}
                for t in self.pareto_front()
            ]
        return data


def _objectives(config: SweepConfig) -> tuple[list[str], list[str]]:
    objectives = config.all_objectives
    metrics = [o.metric for o in objectives]
    directions = ["maximize" if o.mode == "max" else "minimize" for o in objectives]
    return metrics, directions


def _summary(t: TrialRecord, metrics: list[str], searched: set[str]) -> TrialSummary:
    values = None
    if t.state == TrialState.COMPLETE and all(m in t.metrics for m in metrics):
        values = [float(t.metrics[m]) for m in metrics]
    duration = None
    if t.started_at is not None and t.ended_at is not None:
        duration = t.ended_at - t.started_at
    return TrialSummary(
        number=t.number,
        state=t.state,
        values=values,
        params={k: v for k, v in t.params.items() if k in searched} or dict(t.params),
        duration_s=duration,
        last_step=t.last_step,
        error=t.error,
        metrics=dict(t.metrics),
        worker=t.worker,
        host=t.host,
        notes=t.notes,
        started_at=t.started_at,
    )


def no_sweep(name: str, known: list[str], where: str = "this storage") -> str:
    """The line for a sweep name a storage does not hold: the closest it does, and all."""
    hint = did_you_mean(name, known)
    listed = ", ".join(known) or "none"
    hint += " " if hint else ""
    return f"sweep: no sweep named {name!r} in {where}; {hint}(known: {listed})"


def trial_summaries(
    storage: Storage, config: SweepConfig, records: Sequence[TrialRecord] | None = None
) -> list[TrialSummary]:
    """The summaries of a sweep's trials, in the order of their numbers (``records``: the
    sweep's trials as the caller read them, instead of reading them again)."""
    metrics, _ = _objectives(config)
    searched = set(config.dims)
    rows = storage.trials.of(config.name) if records is None else records
    return [_summary(t, metrics, searched) for t in rows]


def counted(row: SweepRecord, counts: dict[str, int], interrupted: bool = False) -> SweepSummary:
    """The summary of the sweep stored as ``row`` with its trials counted by state only
    (``counts``: :meth:`.TrialStore.state_counts`), not read: what a fleet's worker says of a
    sweep it leaves (a thousand workers each reading every trial of a sweep as it ends is a
    thousand times the sweep's table)."""
    metrics, directions = _objectives(row.parsed())
    return SweepSummary(
        sweep=row.name,
        metrics=metrics,
        directions=directions,
        trials=[],
        experiment_id=row.mlflow_experiment_id,
        parent_run_id=row.mlflow_parent_run_id,
        interrupted=interrupted,
        counts=dict(counts),
    )


def summarize(
    storage: Storage,
    name: str,
    interrupted: bool = False,
    records: Sequence[TrialRecord] | None = None,
) -> SweepSummary:
    row = storage.sweeps.get(name)
    if row is None:
        raise ConfigError(no_sweep(name, [r.name for r in storage.sweeps.all()]))
    config = row.parsed()
    metrics, directions = _objectives(config)
    records = storage.trials.of(name) if records is None else records
    cause = stopped_early(config, records)
    return SweepSummary(
        sweep=name,
        metrics=metrics,
        directions=directions,
        trials=trial_summaries(storage, config, records),
        experiment_id=row.mlflow_experiment_id,
        parent_run_id=row.mlflow_parent_run_id,
        interrupted=interrupted,
        stopped=None
        if cause is None
        else stop_line(cause, config.budget.stop_after_alike_failures),
        stop_cause=cause,
    )


def stopped_early(config: SweepConfig, records: Sequence[TrialRecord]) -> str | None:
    """The failure line the sweep's first ``budget.stop_after_alike_failures`` trials to end
    all failed with, when it stopped before its budget for it
    (:mod:`~hyperfleet.platform.storage.failures`); None when they did not, or when the
    trials that ended are its whole budget anyway."""
    cause = alike_failures(records, config.budget.stop_after_alike_failures)
    if cause is None:
        return None
    planned = config.scheduler.population if config.is_population else config.budget.trials
    ended = sum(1 for t in records if t.state in ENDINGS)
    return None if planned is not None and ended >= int(planned) else cause


NO_COMPLETE_EXIT = 4
"""``sweep run``'s exit status when the sweep ended with no trial COMPLETE."""

STOPPED_EXIT = 6
"""``sweep run``'s exit status when the sweep stopped before its budget because its first
trials all failed alike (:func:`stopped_early`)."""


def none_complete(summary: SweepSummary) -> str | None:
    """One line when the sweep ended (nothing running) with no trial COMPLETE: how many
    failed and the first failure's reason; None otherwise."""
    states = [t.state for t in summary.trials]
    if TrialState.COMPLETE in states or TrialState.RUNNING in states:
        return None
    failed = sorted(
        (t for t in summary.trials if t.state == TrialState.FAIL), key=lambda t: t.number
    )
    counts = ", ".join(f"{v} {k}" for k, v in summary.state_counts.items() if v) or "no trials"
    line = f"error: sweep {summary.sweep} ended with no trial COMPLETE ({counts})"
    if failed:
        line += f"; the first, trial {failed[0].number}: {reason(failed[0].error)}"
    return line
