"""TPE's suggestion on a long sweep with ``scheduler.max_history``: the cap recomputed over
the whole history at every read (``history.capped``, as before) against the incremental cap
(``history.IncrementalCap``), side by side, alternating, at two history lengths.

Each size is a study (Optuna's in-memory storage, so the database is not what is measured)
with ``--finished`` trials ended and ``--running`` in flight; each suggestion asks TPE (the
platform's sampler: ``max_history`` 500) for a trial of two floats, and the trial is then
failed, so the history stays the size it was. Both samplers see the same study and give the
same trials (tests/platform/schedulers/test_history.py); only the time differs.

    python benchmarks/bench_history_cap.py                        # 500 and 9,000 finished
    python benchmarks/bench_history_cap.py --finished 1000 20000 --reps 10
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.schedulers.optuna.history import HistoryCappedSampler, capped

SPACE = {"x": FloatDistribution(0.0, 1.0), "lr": FloatDistribution(1e-4, 1e-1, log=True)}


class RecomputedCap(HistoryCappedSampler):
    """The cap as it was: :func:`capped` over every trial read, at every read."""

    def _view(self, study: optuna.Study) -> Any:
        directions = list(study.directions)
        return internals.HistoryView(study, lambda ts, _: capped(ts, self.cap, directions))


def _study(finished: int, running: int, seed: int) -> optuna.Study:
    rng = random.Random(seed)
    study = optuna.create_study()
    trials = []
    for _ in range(finished):
        params = {"x": rng.random(), "lr": 10 ** rng.uniform(-4, -1)}
        value = params["x"] + rng.random() * 0.1
        trials.append(optuna.trial.create_trial(params=params, distributions=SPACE, value=value))
    study.add_trials(trials)
    for _ in range(running):
        t = study.ask()
        for name, dist in SPACE.items():
            t._suggest(name, dist)
    return study


def _suggest_s(study: optuna.Study, sampler: optuna.samplers.BaseSampler) -> float:
    study.sampler = sampler
    started = time.perf_counter()
    t = study.ask()
    for name, dist in SPACE.items():
        t._suggest(name, dist)
    took = time.perf_counter() - started
    study.tell(t, state=TrialState.FAIL)  # the history stays the size it was
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finished", type=int, nargs="+", default=[500, 9000])
    ap.add_argument("--running", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cap", type=int, default=500)
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: dict[int, dict[str, float]] = {}
    for n in args.finished:
        study = _study(n, args.running, seed=n)
        samplers = {
            "recomputed": RecomputedCap(optuna.samplers.TPESampler(seed=0), args.cap),
            "incremental": HistoryCappedSampler(optuna.samplers.TPESampler(seed=0), args.cap),
        }
        for sampler in samplers.values():  # the first read of each (the incremental ranks all)
            _suggest_s(study, sampler)
        times: dict[str, list[float]] = {k: [] for k in samplers}
        for _ in range(args.reps):
            for name, sampler in samplers.items():
                times[name].append(_suggest_s(study, sampler))
        rows[n] = {k: 1000 * statistics.median(v) for k, v in times.items()}
    first, last = args.finished[0], args.finished[-1]
    print(f"TPE suggestion, median of {args.reps}, ms ({args.running} running, cap {args.cap}):")
    print(f"| cap | {first:,} finished | {last:,} finished | ratio |")
    print("| --- | --- | --- | --- |")
    for name in ("recomputed", "incremental"):
        a, b = rows[first][name], rows[last][name]
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
