"""What ``hyperfleet.run`` and ``hyperfleet.load`` return: a sweep's result as Python values.

:class:`SweepResult` is read from the sweep's summary (:mod:`~hyperfleet.platform.storage.results`,
the same one ``sweep run`` and ``sweep status`` print): the best COMPLETE trial, its value and
params, and ``trials``, a pandas DataFrame with one row per trial in the order of their numbers.
Its columns: ``number``, ``state``, ``value`` (the objective; one ``value_<metric>`` column per
objective instead when there are several), ``params_<name>`` for each searched parameter (as
Optuna's ``trials_dataframe`` names them; empty where a trial has no value for it), ``duration``
(seconds, None while running) and ``last_step``.

The result of :func:`hyperfleet.load` is also the sweep's handle: ``status`` reads its status
now, and ``stop()``, ``pause()`` and ``resume()`` do what ``hyperfleet sweep stop``, ``pause``
and ``resume`` do (:mod:`~hyperfleet.platform.sweeps.lifecycle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyperfleet.platform.credentials import masked
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import SweepSummary, TrialSummary, summarize
from hyperfleet.spec.states import SweepStatus

if TYPE_CHECKING:
    import pandas as pd

    from hyperfleet.platform.sweeps.delete import Deleted


@dataclass(frozen=True)
class SweepResult:
    """A sweep as it stands in its storage (see the module docstring)."""

    name: str
    storage: str
    """The storage URL the sweep lives in (give it to :func:`hyperfleet.load`)."""
    summary: SweepSummary
    """The summary ``sweep status`` prints, with MLflow's experiment and parent run ids."""

    @property
    def best_trial(self) -> TrialSummary | None:
        """The best COMPLETE trial (single objective; None for several: see ``pareto_front``)."""
        return self.summary.best()

    @property
    def best_value(self) -> float | None:
        best = self.best_trial
        return None if best is None or not best.values else best.values[0]

    @property
    def best_params(self) -> dict[str, Any] | None:
        best = self.best_trial
        return None if best is None else dict(best.params)

    @property
    def pareto_front(self) -> list[TrialSummary]:
        """The COMPLETE trials no other dominates (several objectives)."""
        return self.summary.pareto_front()

    @property
    def interrupted(self) -> bool:
        return self.summary.interrupted

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial (see the module docstring)."""
        import pandas as pd

        metrics = self.summary.metrics
        names = sorted({k for t in self.summary.trials for k in t.params})
        rows = [_row(t, metrics, names) for t in sorted(self.summary.trials, key=_number)]
        values = ["value"] if len(metrics) == 1 else [f"value_{m}" for m in metrics]
        columns = ["number", "state", *values, *(f"params_{n}" for n in names)]
        return pd.DataFrame(rows, columns=[*columns, "duration", "last_step"])

    def delete(self, keep_files: bool = False) -> Deleted:
        """Delete the sweep, as ``hyperfleet sweep delete NAME --yes`` does (no question
        asked): its storage rows and Optuna study, its run directory (unless ``keep_files``)
        and its MLflow runs; its name is free afterwards. ``ConfigError``, with nothing
        changed, while workers serve it. What was deleted, counted."""
        from hyperfleet.platform.sweeps.delete import delete_sweep, plan_deletion

        return delete_sweep(plan_deletion(self.storage, self.name), keep_files=keep_files)

    @property
    def status(self) -> SweepStatus | None:
        """The sweep's status in its storage now (read at each use; None: not there)."""
        storage = Storage.open_readonly(self.storage)
        try:
            return storage.lifecycle.status(self.name)
        finally:
            storage.close()

    def stop(self) -> SweepStatus:
        """Stop the sweep for good, as ``hyperfleet sweep stop`` does: every worker leaves it
        and its running trials end (FAIL, stopped; not retried); its status now (STOPPED).
        ``ConfigError`` (nothing changed) for a sweep done or stopped already."""
        from hyperfleet.platform.sweeps.lifecycle import stop

        return stop(self.storage, self.name).status

    def pause(self) -> SweepStatus:
        """Pause the sweep, as ``hyperfleet sweep pause`` does: no trial of it is claimed, its
        running trials go back to the queue; its status now (PAUSED)."""
        from hyperfleet.platform.sweeps.lifecycle import pause

        return pause(self.storage, self.name).status

    def resume(self) -> SweepStatus:
        """Resume the paused sweep, as ``hyperfleet sweep resume`` does: workers claim its
        trials again, the paused ones from their checkpoints; its status now (SUBMITTED until
        a worker opens it). ``ConfigError`` (nothing changed) for a sweep not paused."""
        from hyperfleet.platform.sweeps.lifecycle import resume

        return resume(self.storage, self.name).status

    def __repr__(self) -> str:
        counts = ", ".join(f"{v} {k}" for k, v in self.summary.state_counts.items() if v)
        best = "" if self.best_value is None else f", best {self.best_value:.4g}"
        return f"SweepResult({self.name!r}: {counts or 'no trials'}{best}; {masked(self.storage)})"


def _number(t: TrialSummary) -> int:
    return t.number


def _row(t: TrialSummary, metrics: list[str], names: list[str]) -> list[Any]:
    values = list(t.values) if t.values else [None] * len(metrics)
    params = [t.params.get(n) for n in names]
    return [t.number, str(t.state), *values, *params, t.duration_s, t.last_step]


def read_result(storage_url: str, name: str, interrupted: bool = False) -> SweepResult:
    """The result of the sweep ``name`` stored at ``storage_url`` (read-only);
    ``ConfigError`` naming the sweeps there when it holds none of that name."""
    storage = Storage.open_readonly(storage_url)
    try:
        summary = summarize(storage, name, interrupted=interrupted)
    finally:
        storage.close()
    return SweepResult(name=name, storage=storage_url, summary=summary)
