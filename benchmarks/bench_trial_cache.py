"""A suggestion with many trials running: Optuna's cache of a study's trials against the
platform's lean one (``internals.LeanCachedStorage``), side by side, alternating, on one
throwaway PostgreSQL server.

A sweep with ``--running`` trials in flight (each with ``--reports`` intermediate values)
and ``--finished`` ended is read by three studies, one through each cache; each suggestion
reads the history (as ``OptunaScheduler.suggest`` does) and asks a random trial of two
floats. Optuna's cache re-reads every running trial in full at each read; the lean one asks
for their states and how many params, values and attributes each has, and reads in full only
what changed; ``states`` is the lean cache as it was before issue #49 (states alone: it
missed writes to running trials), to show what seeing them costs.

    python benchmarks/bench_trial_cache.py                  # 200 running, 100 finished
    python benchmarks/bench_trial_cache.py --running 1000 --reps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale_harness import new_database, postgres
from hyperfleet.platform.schedulers.optuna.internals import LeanCachedStorage


class StatesOnly(LeanCachedStorage):
    """The lean cache before issue #49: a held unfinished trial re-read only when its state
    changed (one query of the states), so writes to running trials went unseen."""

    def _changed(self, study: Any, seen: int) -> set[int]:
        from optuna.storages._rdb import models

        ids = sorted(i for i in study.unfinished_trial_ids if i <= seen)
        if not ids:
            return set()
        trials = models.TrialModel.__table__
        with self._backend.engine.connect() as conn:
            rows = conn.execute(
                sa.select(trials.c.trial_id, trials.c.state).where(trials.c.trial_id.in_(ids))
            ).all()
        numbers = self._trial_id_to_study_id_and_number
        return {int(t) for t, state in rows if study.trials[numbers[t][1]].state != state}


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
    ap.add_argument("--reports", type=int, default=10, help="intermediate values a trial")
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
            for step in range(args.reports):
                trial.report(float(i + step), step)
            if i < args.finished:
                sweep.tell(trial, float(i))
        caches = {
            "optuna": _CachedStorage(rdb),
            "lean": LeanCachedStorage(rdb),
            "states": StatesOnly(rdb),
        }
        random = optuna.samplers.RandomSampler
        studies = {k: optuna.load_study(storage=c, study_name="s", sampler=random(seed=1))
                   for k, c in caches.items()}  # fmt: skip
        for study in studies.values():
            study.get_trials()  # both caches warm
        times: dict[str, list[float]] = {k: [] for k in studies}
        for _ in range(args.reps):
            for k, study in studies.items():
                times[k].append(suggest(study))
    print(
        f"{args.running} running, {args.finished} finished trials, {args.reports} reports "
        "each; per suggestion:"
    )
    for k, v in times.items():
        med = statistics.median(v)
        print(
            f"  {k:7s} median {1000 * med:7.1f} ms, min {1000 * min(v):7.1f} ms, "
            f"median {med / statistics.median(times['optuna']):.2f}x Optuna's"
        )


if __name__ == "__main__":
    main()
