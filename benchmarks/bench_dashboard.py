"""The dashboard's reads and charts on a sweep of 1,000 trials.

Generates, in a temporary folder, a SQLite storage with a TPE sweep of 1,000 finished trials
(four parameters, leases on 2 hosts x 2 workers x 2 devices, a 50-step MLflow curve per trial
and 8 trials with 5,000-step curves) and a PBT sweep of 100 members with 1,000 exploits, then
times what each page reads — the same ``queries``/``curves`` calls the pages make, uncached —
against the goal of 1 s per page, and what each page's charts cost to build (built once per
finished trial, then cached). It also compares the points and bytes a curve chart sends to the
browser with and without downsampling.

Usage: ``python benchmarks/bench_dashboard.py [--quick] [--data DIR]`` (``--quick``: 1,000-step
long curves and 20 PBT members; ``--data``: generate into DIR once, then reuse it).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.dashboards import charts, queries, timeline, tree
from hyperfleet.dashboards.curves import SqlCurves
from hyperfleet.dashboards.study import build_study
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.schema import (
    LeaseRow,
    TrialRow,
    WorkerRow,
    lineage_table,
    members_table,
)

TRIALS, HOSTS, DEVICES, STEPS = 1000, 2, 4, 50
WORKERS = 2  # per host, each with DEVICES // WORKERS of its devices
GOAL_S = 1.0
SPACE = {
    "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 16, "high": 1024, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "act": {"type": "categorical", "choices": ["relu", "gelu", "silu"]},
}


def _loss(p: dict[str, Any], step: int) -> float:
    base = (math.log10(p["lr"]) + 3) ** 2 * 0.05 + 4 / p["width"] + p["dropout"] * 0.2
    return base + 2.0 * math.exp(-step * p["lr"] * 50)


def _params(rng: random.Random) -> dict[str, Any]:
    return {"lr": 10 ** rng.uniform(-5, -1), "width": int(2 ** rng.uniform(4, 10)),
            "dropout": rng.uniform(0, 0.5), "act": rng.choice(SPACE["act"]["choices"])}  # fmt: skip


def _log_runs(
    client: Any, experiment: str, curves: dict[int, tuple[dict[str, Any], int]]
) -> dict[int, str]:
    from mlflow.entities import Metric

    runs = {}
    for number, (params, steps) in curves.items():
        run = client.create_run(experiment, run_name=f"trial-{number}").info.run_id
        stamp = 1_700_000_000_000 + number * 60_000
        metrics = [
            Metric("loss", _loss(params, s), stamp + s * 100, s) for s in range(1, steps + 1)
        ]
        for start in range(0, len(metrics), 1000):
            client.log_batch(run, metrics=metrics[start : start + 1000])
        runs[number] = run
    return runs


def generate(root: Path, long_steps: int, members: int) -> tuple[str, str]:
    """The storage and MLflow URLs of the generated sweeps (module docstring)."""
    from mlflow.tracking import MlflowClient

    url, tracking = f"sqlite:///{root / 'hf.db'}", f"sqlite:///{root / 'mlflow.db'}"
    storage, client, rng = Storage(url), MlflowClient(tracking), random.Random(0)
    experiment = client.create_experiment("big")
    config = {"objective": {"metric": "loss", "mode": "min"}, "space": SPACE,
              "scheduler": {"type": "tpe"}, "budget": {"trials": TRIALS},
              "tracking": {"uri": tracking}}  # fmt: skip
    storage.sweeps.create("big", config)
    storage.sweeps.update("big", status="done", mlflow_experiment_id=experiment)
    params = {n: _params(rng) for n in range(TRIALS)}
    runs = _log_runs(client, experiment, {n: (p, long_steps if n < 8 else STEPS)
                                          for n, p in params.items()})  # fmt: skip
    with storage.session() as s:
        for n, p in params.items():
            state = "PRUNED" if n % 5 == 4 else ("FAIL" if n % 50 == 49 else "COMPLETE")
            steps = STEPS if state == "COMPLETE" else STEPS // 2
            start = 1_700_000_000.0 + n * 60.0
            s.add(TrialRow(sweep="big", number=n, state=state, params=p, attempts=1,
                           metrics={"loss": _loss(p, steps)}, last_step=steps, started_at=start,
                           ended_at=start + 55, host=f"host{n % HOSTS}", mlflow_run_id=runs[n],
                           error="RuntimeError: nan" if state == "FAIL" else None))  # fmt: skip
            host, device = n % HOSTS, (n // HOSTS) % DEVICES
            worker = device // (DEVICES // WORKERS)
            s.add(LeaseRow(sweep="big", trial=n, host=f"host{host}", pid=100 + worker,
                           devices=[f"cuda:{device}"], started_at=start, ended_at=start + 55,
                           state=state, worker=f"host{host}-{100 + worker}-w"))  # fmt: skip
        per = DEVICES // WORKERS
        for host in range(HOSTS):
            for w in range(WORKERS):
                s.add(WorkerRow(id=f"host{host}-{100 + w}-w", host=f"host{host}", pid=100 + w,
                                devices=[f"cuda:{d}" for d in range(w * per, (w + 1) * per)],
                                started_at=1_700_000_000.0, heartbeat_at=1_700_060_000.0,
                                state="stopped"))  # fmt: skip
    _population(storage, client, members, rng)
    storage.close()
    return url, tracking


def _population(storage: Storage, client: Any, members: int, rng: random.Random) -> None:
    """A PBT sweep: ``members`` members, 1,000 exploits (each with its explore)."""
    config = {"objective": {"metric": "loss", "mode": "min"}, "space": SPACE,
              "scheduler": {"type": "pbt", "population": members}}  # fmt: skip
    storage.sweeps.create("big-pbt", config)
    member_params = {m: _params(rng) for m in range(members)}
    generation = dict.fromkeys(member_params, 0)
    with storage.engine.begin() as conn:
        for i in range(1000):
            m, donor = rng.sample(range(members), 2)
            generation[m] += 1
            step, new = 10 * (i // members + 1), _params(rng)
            for kind, after in (("exploit", member_params[donor]), ("explore", new)):
                conn.execute(lineage_table.insert().values(
                    sweep="big-pbt", time=float(i), step=step, member=m, generation=generation[m],
                    donor=donor, donor_step=step, kind=kind, old_params=member_params[m],
                    new_params=after, member_score=1.0, donor_score=0.5))  # fmt: skip
            member_params[m] = new
        for m, p in member_params.items():
            conn.execute(members_table.insert().values(
                sweep="big-pbt", member=m, params=p, initial=p, state="done", step=10_000,
                score=1.0, steps_trained=10_000, last_check=0, reports=0,
                generation=generation[m], barrier=False, failures=0, history=[],
                updated=0.0))  # fmt: skip


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, float, Any]:
    """Median wall-clock and process-CPU seconds of ``repeat`` calls, and the last result
    (CPU time is steadier on a shared machine: SQLite reads run in this process)."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data", type=Path, help="keep the generated stores here; reuse them")
    args = parser.parse_args()
    long_steps, members = (1000, 20) if args.quick else (5000, 100)
    with tempfile.TemporaryDirectory(prefix="hf-bench-dash-") as tmp:
        root = args.data or Path(tmp)
        url, tracking = f"sqlite:///{root / 'hf.db'}", f"sqlite:///{root / 'mlflow.db'}"
        if not (root / "hf.db").exists():
            root.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            generate(root, long_steps, members)
            print(f"generated {TRIALS} trials, {members} PBT members in "
                  f"{time.perf_counter() - start:.0f} s")  # fmt: skip
        report(Storage.open_readonly(url), SqlCurves(tracking), long_steps)


def report(storage: Storage, curves: SqlCurves, long_steps: int) -> None:
    data = queries.sweep_data(storage, "big")
    runs = {n: data.records[n].mlflow_run_id or "" for n in data.records}

    def sweep_page() -> Any:  # what the Sweep page reads: the sweep, 5 trials' curves
        return queries.sweep_data(storage, "big"), curves.histories(_some(runs, 10, 15), "loss")

    def compare_page() -> Any:  # the sweep, 8 trials' curves (the long ones)
        return queries.sweep_data(storage, "big"), curves.histories(_some(runs, 0, 8), "loss")

    def population_page() -> Any:  # the sweep, its members and lineage, their schedules
        return queries.sweep_data(storage, "big-pbt"), queries.population(storage, "big-pbt")

    pages: list[tuple[str, Callable[[], Any]]] = [
        ("Sweeps: every sweep's summary and leases", lambda: queries.overview(storage)),
        ("Sweep: trials, leases, 5 trials' curves", sweep_page),
        ("Compare: trials, leases, 8 curves of the long trials", compare_page),
        ("Population: members, 2,000 lineage events, schedules", population_page),
        ("Devices: trials, leases, utilisation and pauses", lambda: _devices(storage)),
    ]
    print(f"\n| page: its data queries | wall s | CPU s | wall / goal {GOAL_S:g} s |")
    print("| --- | --- | --- | --- |")
    for name, fn in pages:
        wall, cpu, _ = timed(fn)
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / GOAL_S:.2f} |")
    study = build_study(data)
    cold, _, _ = timed(lambda: charts.importance(study, 0, "loss"), repeat=1)
    pop = queries.population(storage, "big-pbt")
    figures: list[tuple[str, Callable[[], Any]]] = [
        ("in-memory Optuna study", lambda: build_study(data)),
        ("optimisation history", lambda: charts.history(study, "loss")),
        ("best value over time", lambda: charts.best_over_time(data)),
        ("importance (PED-ANOVA)", lambda: charts.importance(study, 0, "loss")),
        ("parallel coordinates", lambda: charts.parallel(study, 0, "loss")),
        ("slice (lr, width)", lambda: charts.slice_plot(study, ["lr", "width"], 0, "loss")),
        ("contour (lr, width)", lambda: charts.contour(study, ["lr", "width"], 0, "loss")),
        ("family tree (2,000 events)", lambda: tree.figure(pop, 0, "lr", True)),
        ("device timeline (1,000 leases)", lambda: _timeline_figure(data)),
    ]
    print(
        "\n| chart, built once per finished trial | seconds (median of 3) | bytes to the browser |"
    )
    print("| --- | --- | --- |")
    for name, fn in figures:
        seconds, _, fig = timed(fn)
        size = len(fig.to_json()) if hasattr(fig, "to_json") else 0
        print(
            f"| {name} | {seconds:.3f} | {size:,} |" if size else f"| {name} | {seconds:.3f} | - |"
        )
    print(f"(the first importance in a process also imports SciPy: {cold:.1f} s)")
    _downsampling(curves, runs, long_steps)


def _some(runs: dict[int, str], start: int, stop: int) -> dict[int, str]:
    return {n: runs[n] for n in range(start, stop)}


def _devices(storage: Storage) -> Any:
    data = queries.sweep_data(storage, "big")
    now = time.time()
    bars = timeline.bars(data.leases, now)
    start, end = timeline.window(data.leases, now)
    return timeline.utilisation(bars, start, end), timeline.pauses(data.leases, now, False)


def _timeline_figure(data: queries.SweepData) -> Any:
    now = time.time()
    return timeline.figure(
        timeline.bars(data.leases, now), timeline.pauses(data.leases, now, False)
    )


def _downsampling(curves: SqlCurves, runs: dict[int, str], long_steps: int) -> None:
    long = curves.histories({n: runs[n] for n in range(8)}, "loss")
    raw = sum(len(c) for c in long.values())
    states = {n: "COMPLETE" for n in long}
    sent = charts.learning_curves(long, states, "step")
    points = sum(len(t.x) for t in sent.data)
    full = _undownsampled_size(long)
    print(f"\n| 8 curves of {long_steps:,} steps | points | bytes to the browser |")
    print("| --- | --- | --- |")
    print(f"| every point | {raw:,} | {full:,} |")
    print(f"| downsampled (min/max per bucket) | {points:,} | {len(sent.to_json()):,} |")
    print(f"| ratio | {points / raw:.3f} | {len(sent.to_json()) / full:.3f} |")


def _undownsampled_size(long: dict[int, Any]) -> int:
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=c.steps, y=c.values, mode="lines") for c in long.values()])
    return len(fig.to_json())


if __name__ == "__main__":
    main()
