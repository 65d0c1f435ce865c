"""Bayesian schedulers with trials in flight: best value by concurrency, beside random search.

Each cell runs one scheduler on one known function (``testfunctions``) with the same trial
budget, ``concurrency`` trials in flight, through ``testfunctions.run_concurrent``: the
platform's ask/tell path on an in-memory Optuna study, the finishing order drawn from the seed,
the sampler told the budget as a sweep's ``budget.trials`` tells it (``final_batch``).
For every function × scheduler × concurrency it prints, over the seeds, the median and worst
best value, the median simple regret (best - known minimum) and its ratio to the same
scheduler's regret at concurrency 1, and random search's median best at the same budget. Then
it checks the acceptance of issue #17 for skopt and gp: median regret at concurrency 4 at most
twice that at concurrency 1, and no seed at concurrency 2 or 4 worse than random's median.

    python benchmarks/bench_parallel_bo.py            # 3 functions, c = 1..16, 10 seeds
    python benchmarks/bench_parallel_bo.py --quick    # make bench: camel6 25 trials, c=1,4, 2 seeds
    python benchmarks/bench_parallel_bo.py --json out.json   # also the raw best values
    python benchmarks/bench_parallel_bo.py --log runs.jsonl  # resumable: finished runs kept
    python benchmarks/bench_parallel_bo.py --schedulers "skopt,skopt cl_min" --functions camel6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import optuna

from hyperfleet.platform.config.scheduler_parsing import parse_scheduler_config
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.testing.functions import FUNCTIONS, run_concurrent

SCHEDULERS: dict[str, dict[str, Any]] = {
    "skopt": {"type": "skopt"},
    "gp": {"type": "gp"},
    "tpe": {"type": "tpe"},
    "random": {"type": "random"},
}
# Run only when named in --schedulers: skopt with the other lies, to compare them.
EXTRA: dict[str, dict[str, Any]] = {
    **{f"skopt {lie}": {"type": "skopt", "liar": lie} for lie in ("cl_min", "cl_mean", "cl_max")},
    "gp qlogei": {"type": "gp", "pending": "qlogei"},  # Optuna's batch acquisition
}
BUDGET = {"branin": 40, "camel6": 40, "hartmann6": 60}
QUICK_BUDGET = {"camel6": 25}  # --quick, a smoke run that takes under a minute on 2 idle cores
CHECKED = ("skopt", "gp")

Cell = tuple[str, str, int]  # function, scheduler, concurrency


def run_one(
    fn_name: str, raw: dict[str, Any], n_trials: int, concurrency: int, seed: int
) -> tuple[float, float]:
    """Best value of one seeded run of the scheduler config ``raw``, and its seconds."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    fn = FUNCTIONS[fn_name]
    cfg = parse_scheduler_config({**raw, "seed": seed})
    start = time.perf_counter()
    study = optuna.create_study(sampler=build_sampler(cfg, n_trials=n_trials))
    values = run_concurrent(study, fn, n_trials, concurrency, seed=seed)
    return min(values), time.perf_counter() - start


def _one_thread() -> None:
    """Pool initializer: one BLAS / torch thread per worker (the pool is the parallelism; two
    workers of two threads on two cores only contend). It changes no result."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(limits=1)


def run_all(
    cells: list[Cell], seeds: list[int], jobs: int, log: Path | None = None
) -> dict[Cell, list[float]]:
    """Best value per cell, in seed order. Each finished run is printed (stderr) and, with
    ``log``, appended to it as a JSON line; runs already in ``log`` are not run again."""
    tasks = [(*cell, seed) for cell in cells for seed in seeds]
    found: dict[tuple[str, str, int, int], tuple[float, float]] = {}
    if log is not None and log.exists():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            key = (r["function"], r["scheduler"], r["concurrency"], r["seed"])
            found[key] = (r["best"], r["seconds"])
    todo = [t for t in tasks if t not in found]
    # Cheap baselines first, then the cells the acceptance checks (c <= 4), cheap functions
    # first, so that a run cut short (--log resumes it) has whole functions to show.
    todo.sort(key=lambda t: (t[1] not in ("random", "tpe"), t[2] > 4, BUDGET[t[0]], t[0], t[2]))
    with ProcessPoolExecutor(jobs, initializer=_one_thread) as pool:
        futures = {
            pool.submit(run_one, fn, SCHEDULERS[name], BUDGET[fn], c, seed): (fn, name, c, seed)
            for fn, name, c, seed in todo
        }
        for n, future in enumerate(as_completed(futures), 1):
            task, (best, spent) = futures[future], future.result()
            found[task] = (best, spent)
            print(f"[{n}/{len(todo)}] {task}: best {best:.4f} ({spent:.0f} s)", file=sys.stderr)
            if log is not None:
                keys = ("function", "scheduler", "concurrency", "seed")
                row = {**dict(zip(keys, task, strict=True)), "best": best, "seconds": spent}
                with log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    bests = {cell: [found[(*cell, seed)][0] for seed in seeds] for cell in cells}
    seconds: dict[str, float] = {}
    for task in tasks:
        seconds[task[1]] = seconds.get(task[1], 0.0) + found[task][1]
    spent = ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items())
    print(f"run time per scheduler, summed over its cells: {spent}")
    return bests


def report(bests: dict[Cell, list[float]], functions: list[str], levels: list[int]) -> list[str]:
    """Print the table; return one line per failed acceptance check."""
    failures: list[str] = []
    print(
        "\n| function | scheduler | c | median best | worst best | median regret | "
        "regret / c=1 | random median |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for fn_name in functions:
        fn = FUNCTIONS[fn_name]
        random_median = statistics.median(bests[(fn_name, "random", 1)])
        for scheduler in SCHEDULERS:
            base = statistics.median(bests[(fn_name, scheduler, 1)]) - fn.minimum
            for c in levels if scheduler != "random" else [1]:
                values = bests[(fn_name, scheduler, c)]
                regret = statistics.median(values) - fn.minimum
                ratio = regret / base if base > 0 else float("inf")
                print(
                    f"| {fn_name} | {scheduler} | {c} | {statistics.median(values):.4f} | "
                    f"{max(values):.4f} | {regret:.2g} | {ratio:.2f} | {random_median:.4f} |"
                )
                if scheduler not in CHECKED:
                    continue
                if c == 4 and ratio > 2.0:
                    failures.append(
                        f"{fn_name} {scheduler}: median regret at c=4 is {ratio:.2f}x c=1's "
                        f"({regret:.2g} vs {base:.2g})"
                    )
                if c in (2, 4) and max(values) > random_median:
                    failures.append(
                        f"{fn_name} {scheduler} c={c}: worst seed {max(values):.4f} is worse "
                        f"than random's median {random_median:.4f}"
                    )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="camel6 25 trials, c=1 and 4, 2 seeds")
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds 0..N-1 (default 10; quick 2)"
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, default=None, help="write the raw best values")
    parser.add_argument(
        "--log", type=Path, default=None, help="append each run here; runs already in it are kept"
    )
    parser.add_argument("--functions", default=None, help="comma-separated subset")
    parser.add_argument("--levels", default=None, help="concurrency levels, e.g. 1,2,4")
    parser.add_argument(
        "--schedulers", default=None, help=f"comma-separated, of {[*SCHEDULERS, *EXTRA]}"
    )
    args = parser.parse_args()
    functions = ["camel6"] if args.quick else ["branin", "hartmann6", "camel6"]
    if args.functions:
        functions = args.functions.split(",")
    if args.schedulers:
        keep = ["random", *args.schedulers.split(",")]  # random is every cell's baseline
        chosen = {name: {**SCHEDULERS, **EXTRA}[name] for name in keep}
        SCHEDULERS.clear()
        SCHEDULERS.update(chosen)
    levels = [1, 4] if args.quick else [1, 2, 4, 8, 16]
    if args.levels:
        levels = sorted({1, *(int(c) for c in args.levels.split(","))})  # c=1 is the reference
    if args.quick:
        BUDGET.update(QUICK_BUDGET)
    seeds = list(range(args.seeds or (2 if args.quick else 10)))
    cells = [
        (fn_name, scheduler, c)
        for fn_name in functions
        for scheduler in SCHEDULERS
        for c in (levels if scheduler != "random" else [1])
    ]
    budgets = ", ".join(f"{f} {BUDGET[f]}" for f in functions)
    print(f"trials per run: {budgets}; seeds {seeds}; concurrency {levels}")
    bests = run_all(cells, seeds, args.jobs, args.log)
    failures = report(bests, functions, levels)
    if args.json:
        raw = [
            {"function": f, "scheduler": s, "concurrency": c, "seeds": seeds, "best": v}
            for (f, s, c), v in bests.items()
        ]
        args.json.write_text(json.dumps(raw, indent=1))
        print(f"\nraw best values: {args.json}")
    if len(seeds) < 5 or not {1, 2, 4} <= set(levels):
        print("\nacceptance (skopt, gp): not checked (it needs >= 5 seeds and c = 1, 2, 4)")
        return 0
    verdict = "holds" if not failures else "FAILS"
    print(f"\nacceptance (skopt, gp) on {', '.join(functions)}: {verdict}")
    for line in failures:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
