"""A suggestion with many trials running: Optuna's cache of a study's trials against the
platform's lean one (``internals.LeanCachedStorage``), side by side, alternating, on one
throwaway PostgreSQL server.

A sweep with ``--running`` trials in flight (and ``--finished`` ended) is read by two studies,
one through each cache; each suggestion reads the history (as ``OptunaScheduler.suggest``
does) and asks a random trial of two floats. Optuna's cache re-reads every running trial in
full at each read; the lean one reads their states and only what changed.

    python benchmarks/bench_trial_cache.py                  # 200 running, 100 finished
    python benchmarks/bench_trial_cache.py --running 1000 --reps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import optuna
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale_harness import new_database, postgres
from hyperfleet.platform.schedulers.optuna.internals import LeanCachedStorage


def suggest(study: optuna.Study) -> float:
    t0 = time.perf_counter()
    study.get_trials(deepcopy=False)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_float("y", 0.0, 1.0)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--running", type=int, default=200)
    ap.add_argument("--finished", type=int, default=100)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with postgres() as server:
        rdb = RDBStorage(new_database(server))
        sweep = optuna.create_study(storage=rdb, study_name="s")
        for i in range(args.running + args.finished):
            trial = sweep.ask()
            trial.suggest_float("x", 0.0, 1.0)
            trial.suggest_float("y", 0.0, 1.0)
            if i < args.finished:
                sweep.tell(trial, float(i))
        caches = {"optuna": _CachedStorage(rdb), "lean": LeanCachedStorage(rdb)}
        random = optuna.samplers.RandomSampler
        studies = {k: optuna.load_study(storage=c, study_name="s", sampler=random(seed=1))
                   for k, c in caches.items()}  # fmt: skip
        for study in studies.values():
            study.get_trials()  # both caches warm
        times: dict[str, list[float]] = {k: [] for k in studies}
        for _ in range(args.reps):
            for k, study in studies.items():
                times[k].append(suggest(study))
    print(f"{args.running} running, {args.finished} finished trials; per suggestion:")
    for k, v in times.items():
        print(f"  {k:7s} median {1000 * statistics.median(v):7.1f} ms, min {1000 * min(v):7.1f} ms")


if __name__ == "__main__":
    main()
