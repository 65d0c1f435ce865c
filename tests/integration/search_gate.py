"""The concurrency gate's runs (``test_search_gate``): a sweep file per (sampler, function,
seed, concurrency), run by ``hyperfleet sweep run FILE --json`` in this process, and what its
storage says afterwards.

A sweep is what a user writes to minimise a known function with in-process trials
(``trial.resources.devices: 0``, one step, the workload :func:`workload` below), its stores a
SQLite file and an MLflow SQLite store in a scratch directory. ``hyperfleet sweep run`` is
called through typer's ``CliRunner`` (``tests.integration.cli.invoke``): the command's own code
(``load_sweep``, ``SweepRunner``, the trial lines, the summary, the exit status), without an
interpreter start of seconds per sweep. The trials are then read back from the sweep's Optuna
study: each one's params, value and ``datetime_start`` / ``datetime_complete``, the window in
which it is a RUNNING trial of the study, that is, a point in flight. The controller makes one
suggestion at a time (under the sweep's claim lock), so a trial created inside another's
window was suggested after that one's params were written: a sampler that handles trials in
flight had that point as a pending one.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import yaml

from hyperfleet.testing.functions import BRANIN, CAMEL6, KnownFunction, hartmann
from hyperfleet.testing.sweeps import minimal_sweep

# Hartmann-3: three coordinates on the unit cube, four Gaussian wells; global minimum
# -3.86278 at (0.114614, 0.555649, 0.852547), a local one of -3.09 beside it. The 3-D member
# of the Hartmann family (Dixon & Szegö, 1978), a standard Bayesian optimisation benchmark.
_H3_ALPHA = (1.0, 1.2, 3.0, 3.2)
_H3_A = ((3.0, 10.0, 30.0), (0.1, 10.0, 35.0), (3.0, 10.0, 30.0), (0.1, 10.0, 35.0))
_H3_P = (
    (0.3689, 0.1170, 0.2673),
    (0.4699, 0.4387, 0.7470),
    (0.1091, 0.8732, 0.5547),
    (0.0381, 0.5743, 0.8828),
)


def hartmann3(x: Sequence[float]) -> float:
    """Hartmann-3 on ``[0, 1]^3``; global minimum -3.86278."""
    return hartmann(x, _H3_ALPHA, _H3_A, _H3_P)


HARTMANN3 = KnownFunction(
    name="hartmann3",
    fn=hartmann3,
    bounds=((0.0, 1.0),) * 3,
    minimum=-3.86278,
    argmins=((0.114614, 0.555649, 0.852547),),
)

FUNCTIONS = {f.name: f for f in (CAMEL6, BRANIN, HARTMANN3)}
WORKLOAD = f"{__name__}:workload"


def workload(ctx: Any) -> None:
    """A trial that evaluates ``params.function`` at ``x0, x1, ...`` and reports ``value``."""
    fn = FUNCTIONS[str(ctx.params["function"])]
    x = [float(ctx.params[f"x{i}"]) for i in range(fn.dim)]
    ctx.report(1, {"value": fn.fn(x)})


workload.hyperfleet_params = {"function": "camel6", "x0": 0.0, "x1": 0.0, "x2": 0.0}  # type: ignore[attr-defined]


def scheduler(sampler: str, seed: int, n_startup: int) -> dict[str, Any]:
    """The ``scheduler:`` section: ``sampler`` with a random start-up of ``n_startup`` trials
    (skopt calls it ``n_initial_points``), every other option at its default."""
    key = "n_initial_points" if sampler == "skopt" else "n_startup_trials"
    return {"type": sampler, "seed": seed, key: n_startup}


@dataclass(frozen=True)
class Trial:
    number: int
    x: tuple[float, ...]
    value: float
    start: datetime  # Optuna's datetime_start: the trial created, before its suggestion
    end: datetime  # Optuna's datetime_complete: its result told


@dataclass(frozen=True)
class Run:
    """One finished sweep: its trials in number order, and how long ``sweep run`` took."""

    sampler: str
    fn: KnownFunction
    seed: int
    concurrency: int
    trials: list[Trial]
    seconds: float

    @property
    def best(self) -> float:
        return min(t.value for t in self.trials)

    @property
    def peak_in_flight(self) -> int:
        """The most trials whose windows overlap at one instant."""
        events = sorted([(t.start, 1) for t in self.trials] + [(t.end, -1) for t in self.trials])
        now = peak = 0
        for _, step in events:  # at one instant an end (-1) sorts before a start
            now += step
            peak = max(peak, now)
        return peak


def distance(fn: KnownFunction, a: Sequence[float], b: Sequence[float]) -> float:
    """The largest coordinate difference of ``a`` and ``b``, each as a fraction of its side
    of ``fn``'s box (0: the same point; 1: opposite corners)."""
    return max(abs(p - q) / (hi - lo) for p, q, (lo, hi) in zip(a, b, fn.bounds, strict=True))


def overlap(a: Trial, b: Trial) -> bool:
    """Both trials were in flight at one instant (their windows intersect)."""
    return a.start < b.end and b.start < a.end


def sharing(run: Run, tol: float, below: int) -> list[int]:
    """The numbers of the trials numbered below ``below`` that share their point with another
    one of them in flight beside it: a trial whose window intersects theirs, within ``tol`` of
    it (:func:`distance`)."""
    counted = [t for t in run.trials if t.number < below]
    return sorted(
        {
            n
            for a, b in combinations(counted, 2)
            if overlap(a, b) and distance(run.fn, a.x, b.x) <= tol
            for n in (a.number, b.number)
        }
    )


def nearest_in_flight(run: Run, below: int) -> float:
    """The smallest distance between two trials in flight at once, both numbered below
    ``below`` (for the report)."""
    return min(
        (
            distance(run.fn, a.x, b.x)
            for a, b in combinations(run.trials, 2)
            if a.number < below and b.number < below and overlap(a, b)
        ),
        default=math.inf,
    )


@dataclass(frozen=True)
class Case:
    """One run of the gate: a sampler on a function, its seed, trials in flight, budget and
    the sampler's startup trials."""

    sampler: str
    fn: KnownFunction
    seed: int
    concurrency: int
    n_trials: int
    n_startup: int


def write_sweep(root: Path, mlflow_template: Path, case: Case) -> Path:
    """The sweep file of one run, its stores under ``root`` (which it creates)."""
    sampler, fn, seed, concurrency = case.sampler, case.fn, case.seed, case.concurrency
    n_trials, n_startup = case.n_trials, case.n_startup
    root.mkdir(parents=True)
    shutil.copy(mlflow_template, root / "mlflow.db")  # MLflow's migrations done once
    data = minimal_sweep(
        name=f"gate-{sampler}-{fn.name}-s{seed}-c{concurrency}",
        objective={"metric": "value", "mode": "min"},
        scheduler=scheduler(sampler, seed, n_startup),
        budget={"trials": n_trials, "max_concurrent": concurrency},
        space={
            f"x{i}": {"type": "float", "low": lo, "high": hi}
            for i, (lo, hi) in enumerate(fn.bounds)
        },
        trial={"workload": WORKLOAD, "params": {"function": fn.name}, "steps": 1},
        storage=f"sqlite:///{root / 'hf.db'}",
        tracking={"uri": f"sqlite:///{root / 'mlflow.db'}", "log_model": False},
        workdir=str(root),
    )
    path = root / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_sweep(root: Path, mlflow_template: Path, case: Case) -> Run:
    """``hyperfleet sweep run FILE --json`` on a new sweep; its trials read back."""
    import optuna

    from tests.integration.cli import invoke

    path = write_sweep(root, mlflow_template, case)
    fn, n_trials = case.fn, case.n_trials
    began = time.monotonic()
    result = invoke("sweep", "run", str(path), "--json")
    seconds = time.monotonic() - began
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, (result.exit_code, result.output[-3000:])
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["state_counts"].get("COMPLETE") == n_trials, summary["state_counts"]

    data = yaml.safe_load(path.read_text())
    study = optuna.load_study(study_name=data["name"], storage=data["storage"])
    trials = []
    for t in study.get_trials(deepcopy=False):
        assert t.state == optuna.trial.TrialState.COMPLETE, (t.number, t.state)
        assert t.datetime_start is not None and t.datetime_complete is not None
        assert t.value is not None
        x = tuple(float(t.params[f"x{i}"]) for i in range(fn.dim))
        trials.append(Trial(t.number, x, float(t.value), t.datetime_start, t.datetime_complete))
    trials.sort(key=lambda t: t.number)
    assert len(trials) == n_trials
    return Run(case.sampler, fn, case.seed, case.concurrency, trials, seconds)
