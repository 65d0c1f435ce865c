"""The four side-by-side benchmarks of trial start-up (issue #15), each a function of a scratch
directory and a :class:`Size`, returning its raw figures and a Markdown table.

1. **Overhead per trial**: N no-op trials reporting 10 times, concurrency 2, a pool of 2 CPU
   slots, one slot per trial: hyperfleet warm, hyperfleet cold (``trial.reuse: false``),
   hyperfleet in-process (``devices: 0``), Ray Tune (``Tuner.fit``, same concurrency) and
   plain Optuna (``study.optimize(n_jobs=2)`` on SQLite). Overhead = (wall - in-trial
   compute) / trials, the compute of a no-op trial being nil: everything the command costs,
   interpreter start-up and the tool's own set-up included, spread over its trials.
2. **Quickstart**: ``examples/quickstart.yaml`` (DDP digits trials of 2 ranks, 2 at once),
   wall time warm vs cold.
3. **PBT**: Ray's own PBT example (the learning-rate triangle wave, population 8, perturbation
   interval 5, on 2 CPUs so members time-share them) under Ray's PBT and hyperfleet's, same
   mutations: wall time to the stopping score (accuracy > 200) and the best score.
4. **Growth**: in-process overhead per trial at 10, 100 and 1,000 trials beside plain Optuna.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.side_by_side import (
    PEERS,
    ROOT,
    Run,
    hyperfleet_sweep,
    median,
    peer_python,
    rounds,
    timed,
)


@dataclass(frozen=True)
class Size:
    """How big each benchmark is: ``quick`` (``make bench``) or ``full``, or the smallest
    case (the test that keeps the suite from rotting)."""

    noop_trials: int = 40
    noop_rounds: int = 3
    quickstart_trials: int = 8
    quickstart_steps: int = 200
    quickstart_rounds: int = 2
    pbt_population: int = 8
    pbt_score: float = 200.0
    pbt_rounds: int = 3
    growth: tuple[int, ...] = (10, 100, 1000)
    peers: bool = True  # run Ray Tune and plain Optuna too


FULL = Size()
QUICK = Size(noop_trials=8, noop_rounds=1, quickstart_trials=4, quickstart_steps=50,
             quickstart_rounds=1, pbt_population=4, pbt_score=60.0, pbt_rounds=1,
             growth=(10, 50))  # fmt: skip
SMALLEST = Size(noop_trials=2, noop_rounds=1, quickstart_trials=1, quickstart_steps=10,
                quickstart_rounds=1, pbt_population=2, pbt_score=5.0, pbt_rounds=1,
                growth=(2,), peers=False)  # fmt: skip

REPORTS = 10


def noop_sweep(trials: int, devices: int, reuse: bool = True) -> dict[str, Any]:
    return {
        "objective": {"metric": "score", "mode": "max"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": trials, "max_concurrent": 2},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {
            "workload": "benchmarks.workloads:noop",
            "steps": REPORTS,
            "eval_every": 1,
            "resources": {"devices": devices},
            "reuse": reuse,
        },
    }


def _check(run: Run, trials: int) -> Run:
    counts = run.out.get("state_counts", {})
    if counts and counts.get("COMPLETE") != trials:
        raise RuntimeError(f"expected {trials} COMPLETE trials, got {counts}")
    return run


def overhead(scratch: Path, size: Size) -> dict[str, Any]:
    """Benchmark 1 (see the module docstring)."""
    n = size.noop_trials

    def hf(name: str, devices: int, reuse: bool = True) -> Any:
        sweep = noop_sweep(n, devices, reuse)
        return lambda _: _check(hyperfleet_sweep(scratch, name, sweep, "cpu:2"), n)

    contenders = {
        "hyperfleet warm": hf("warm", 1),
        "hyperfleet cold (reuse: false)": hf("cold", 1, reuse=False),
        "hyperfleet in-process": hf("inprocess", 0),
    }
    if size.peers:
        ray, optuna = peer_python("ray"), peer_python("optuna")
        contenders["Ray Tune"] = lambda _: timed(
            [ray, str(PEERS / "ray_noop.py"), str(n), str(REPORTS), "2"], cwd=scratch
        )
        contenders["plain Optuna"] = lambda r: timed(
            [optuna, str(PEERS / "optuna_noop.py"), str(n), str(REPORTS), "2",
             str(scratch / f"optuna-{n}-{r}.db")], cwd=scratch,
        )  # fmt: skip
    runs = rounds(contenders, size.noop_rounds)
    per_trial = {k: median([r.wall for r in v]) / n for k, v in runs.items()}
    ray = per_trial.get("Ray Tune")
    rows = [
        f"| {k} | {median([r.wall for r in v]):.1f} | {per_trial[k]:.3f} | "
        f"{'' if ray is None else f'{per_trial[k] / ray:.2f}'} |"
        for k, v in runs.items()
    ]
    table = "\n".join([
        f"{n} no-op trials reporting {REPORTS} times, concurrency 2, pool cpu:2, "
        f"{size.noop_rounds} interleaved round(s), medians:",
        "",
        "| contender | wall s | overhead per trial s | / Ray Tune |",
        "| --- | --- | --- | --- |",
        *rows,
    ])  # fmt: skip
    raw = {k: [r.wall for r in v] for k, v in runs.items()}
    return {"trials": n, "reports": REPORTS, "walls": raw, "per_trial": per_trial,
            "table": table}  # fmt: skip


def quickstart(scratch: Path, size: Size) -> dict[str, Any]:
    """Benchmark 2 (see the module docstring)."""
    base = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    for key in ("name", "storage", "tracking", "pruner"):  # warm against cold: every trial whole
        base.pop(key, None)
    base["budget"]["trials"] = size.quickstart_trials
    base["trial"]["steps"] = size.quickstart_steps
    base["trial"]["eval_every"] = min(base["trial"]["eval_every"], size.quickstart_steps)
    n = size.quickstart_trials

    def sweep(reuse: bool) -> Any:
        data = copy.deepcopy(base)
        data["trial"]["reuse"] = reuse
        name = "qs-warm" if reuse else "qs-cold"
        return lambda _: _check(hyperfleet_sweep(scratch, name, data, "cpu:4"), n)

    runs = rounds({"warm": sweep(True), "cold (reuse: false)": sweep(False)},
                  size.quickstart_rounds)  # fmt: skip
    walls = {k: median([r.wall for r in v]) for k, v in runs.items()}
    ratio = walls["warm"] / walls["cold (reuse: false)"]
    table = "\n".join([
        f"examples/quickstart.yaml, {n} trials of {size.quickstart_steps} steps (DDP, 2 ranks "
        f"each, 2 at once, pool cpu:4), {size.quickstart_rounds} interleaved round(s), medians:",
        "",
        "| | wall s | per trial s |",
        "| --- | --- | --- |",
        *[f"| {k} | {w:.1f} | {w / n:.2f} |" for k, w in walls.items()],
        f"| warm / cold | {ratio:.2f} | |",
    ])  # fmt: skip
    return {"trials": n, "walls": {k: [r.wall for r in v] for k, v in runs.items()},
            "warm_over_cold": ratio, "table": table}  # fmt: skip


def growth(scratch: Path, size: Size) -> dict[str, Any]:
    """Benchmark 4 (see the module docstring): one run per size and contender, alternating."""
    optuna = peer_python("optuna") if size.peers else None
    per_trial: dict[str, dict[int, float]] = {"hyperfleet in-process": {}, "plain Optuna": {}}
    for n in size.growth:
        run = _check(hyperfleet_sweep(scratch, f"growth-{n}", noop_sweep(n, 0), "cpu:2"), n)
        per_trial["hyperfleet in-process"][n] = run.wall / n
        print(f"  {n} trials hyperfleet in-process: {run.wall:.2f} s", flush=True)
        if optuna is not None:
            db = scratch / f"growth-optuna-{n}.db"
            run = timed([optuna, str(PEERS / "optuna_noop.py"), str(n), str(REPORTS), "2",
                         str(db)], cwd=scratch)  # fmt: skip
            per_trial["plain Optuna"][n] = run.wall / n
            print(f"  {n} trials plain Optuna: {run.wall:.2f} s", flush=True)
    head = " | ".join(f"{n} trials" for n in size.growth)
    rows = [
        f"| {k} | " + " | ".join(f"{v[n]:.3f}" for n in size.growth) + " |"
        for k, v in per_trial.items()
        if v
    ]
    table = "\n".join([
        f"Overhead per no-op trial (wall / trials, s), {REPORTS} reports each, concurrency 2:",
        "",
        f"| contender | {head} |",
        "| --- |" + " --- |" * len(size.growth),
        *rows,
    ])  # fmt: skip
    return {"per_trial": {k: {str(n): x for n, x in v.items()} for k, v in per_trial.items()},
            "table": table}  # fmt: skip
