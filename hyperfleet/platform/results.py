"""Read-side summaries of a sweep, shared by ``sweep run``, ``sweep status`` and the dashboard."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.platform.storage import Storage


@dataclass(frozen=True)
class TrialSummary:
    number: int
    state: str
    values: list[float] | None
    params: dict[str, Any]
    duration_s: float | None
    last_step: int | None
    error: str | None


@dataclass(frozen=True)
class SweepSummary:
    sweep: str
    directions: list[str]
    trials: list[TrialSummary]
    experiment_id: str | None = None
    parent_run_id: str | None = None
    interrupted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def state_counts(self) -> dict[str, int]:
        counts = Counter(t.state for t in self.trials)
        base = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        base.update(counts)
        return base

    def best(self) -> TrialSummary | None:
        if len(self.directions) != 1:
            return None
        done = [t for t in self.trials if t.state == "COMPLETE" and t.values]
        if not done:
            return None
        sign = -1.0 if self.directions[0] == "maximize" else 1.0
        return min(done, key=lambda t: sign * t.values[0])  # type: ignore[index]

    def to_json(self) -> dict[str, Any]:
        best = self.best()
        return {
            "sweep": self.sweep,
            "state_counts": self.state_counts,
            "best": None
            if best is None
            else {"number": best.number, "value": best.values[0], "params": best.params},  # type: ignore[index]
            "mlflow": {"experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id},
            "interrupted": self.interrupted,
        }


def summarize(storage: Storage, name: str, interrupted: bool = False) -> SweepSummary:
    import optuna

    row = storage.get_sweep(name)
    if row is None:
        from hyperfleet.errors import ConfigError

        known = ", ".join(r.name for r in storage.list_sweeps()) or "none"
        raise ConfigError(f"sweep: no sweep named {name!r} in this storage (known: {known})")
    study = optuna.load_study(study_name=row.study_name, storage=storage.optuna)
    records = {t.number: t for t in storage.trials(name)}
    trials = []
    for t in study.get_trials(deepcopy=False):
        duration = None
        if t.datetime_start and t.datetime_complete:
            duration = (t.datetime_complete - t.datetime_start).total_seconds()
        rec = records.get(t.number)
        trials.append(
            TrialSummary(
                number=t.number,
                state=t.state.name,
                values=list(t.values) if t.values else None,
                params=dict(t.params),
                duration_s=duration,
                last_step=rec.last_step if rec else None,
                error=rec.error if rec else None,
            )
        )
    directions = [d.name.lower() for d in study.directions]
    return SweepSummary(
        sweep=name,
        directions=directions,
        trials=trials,
        experiment_id=row.mlflow_experiment_id,
        parent_run_id=row.mlflow_parent_run_id,
        interrupted=interrupted,
    )
