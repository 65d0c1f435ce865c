"""What ``sweep run``, ``sweep status`` and ``sweep list`` print about sweeps: the results
and Pareto tables, the best line, the failures and the list of a storage's sweeps.

Values are rounded to 4 significant digits and params written ``name=value``
(:func:`~hyperfleet.platform.sweeps.display.compact`), never as Python reprs; the ``worker``
column is there only when the trials ran on more than one host.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from rich.table import Table

from hyperfleet.platform.storage.failures import reason
from hyperfleet.platform.storage.results import ENDINGS, SweepSummary, trial_summaries
from hyperfleet.platform.sweeps.display import compact, params_text
from hyperfleet.spec.states import TrialState

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.storage import Storage, SweepRecord


def _where(summary: SweepSummary) -> set[str]:
    """The hosts (else workers) the sweep's trials ran on."""
    return {h for t in summary.trials if (h := t.host or t.worker)}


def results_table(summary: SweepSummary) -> Table:
    """One row per trial; the best is marked ``*``."""
    table = Table(title=f"sweep {summary.sweep}")
    hosts = len(_where(summary)) > 1
    for col in ("trial", "state", "value", "params", "steps", "seconds"):
        table.add_column(col)
    if hosts:
        table.add_column("worker")
    best = summary.best()
    for t in summary.trials:
        value = ", ".join(f"{v:.4g}" for v in t.values) if t.values else "-"
        mark = " *" if best is not None and t.number == best.number else ""
        row = [
            f"{t.number}{mark}",
            str(t.state),
            value,
            params_text(t.params),
            "-" if t.last_step is None else str(t.last_step),
            "-" if t.duration_s is None else f"{t.duration_s:.1f}",
        ]
        table.add_row(*row, *([t.worker or t.host or "-"] if hosts else []))
    return table


def pareto_table(summary: SweepSummary) -> Table:
    table = Table(title="Pareto front")
    table.add_column("trial")
    for metric, direction in zip(summary.metrics, summary.directions, strict=True):
        table.add_column(f"{metric} ({direction[:3]})")
    table.add_column("params")
    for t in sorted(summary.pareto_front(), key=lambda t: t.values or []):
        values = t.values or []
        table.add_row(str(t.number), *(f"{v:.4g}" for v in values), params_text(t.params))
    return table


def best_line(summary: SweepSummary) -> str | None:
    """``best: trial 3, loss = 0.1234 (x=0.52)``, or None without a COMPLETE trial (or with
    several objectives: the Pareto table says it)."""
    best = summary.best()
    if best is None or not best.values:
        return None
    params = f" ({params_text(best.params)})" if best.params else ""
    return f"best: trial {best.number}, {summary.metrics[0]} = {best.values[0]:.4g}{params}"


def failure_lines(summary: SweepSummary) -> list[str]:
    """``trial 2 failed: RuntimeError: ...``, one per failed trial, with its first reason."""
    failed = [t for t in summary.trials if t.state == TrialState.FAIL]
    return [f"trial {t.number} failed: {reason(t.error)}" for t in failed]


def _budget(cfg: SweepConfig) -> int | None:
    """How many trials the sweep runs (None: until its timeout)."""
    return int(cfg.scheduler.population) if cfg.is_population else cfg.budget.trials


def list_table(storage: Storage, rows: list[SweepRecord], title: str) -> Table:
    """``sweep list``: each sweep's objective, progress (ended/budget), best value, state and
    creation time."""
    table = Table(title=title)
    for col in ("sweep", "objective", "progress", "best", "state", "created"):
        table.add_column(col)
    for r in rows:
        created = dt.datetime.fromtimestamp(r.created_at).isoformat(timespec="seconds")
        objective, progress, best = "-", "-", "-"
        if r.config is not None:
            objective, progress, best = _standing(storage, r.config)
        table.add_row(r.name, objective, progress, best, str(r.status), created)
    return table


def _standing(storage: Storage, cfg: SweepConfig) -> tuple[str, str, str]:
    """A sweep's objective (``loss min``), progress (``3/8``) and best value."""
    objectives = cfg.all_objectives
    objective = ", ".join(f"{o.metric} {o.mode}" for o in objectives)
    trials = trial_summaries(storage, cfg)
    ended = sum(t.state in ENDINGS for t in trials)
    values = [t.values[0] for t in trials if t.values]
    best = "-"
    if values and len(objectives) == 1:
        best = compact(float(max(values) if objectives[0].mode == "max" else min(values)))
    budget = _budget(cfg)
    return objective, f"{ended}" if budget is None else f"{ended}/{budget}", best
