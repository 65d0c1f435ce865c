"""The scheduler's own time per trial against the sweep's length, on PostgreSQL, one worker.

For each scheduler (random, TPE) and history length (default 100 and 10,000 finished trials),
a sweep is created on a throwaway PostgreSQL and its study filled with that many finished
trials (Optuna's ``add_trials``: random points of the harness's two dimensions, each with two
intermediate values). Then, in rounds alternating the lengths side by side, each sweep's
scheduler makes a suggestion and ends it (``suggest`` + ``on_trial_end``: what a claim and a
trial's end ask of it, with every database round trip); each such trial ends COMPLETE, so a
history grows by ``--reps`` trials, under 1 % of the longer one. Prints milliseconds per
trial and the ratio of the longest to the shortest. One worker, so no other worker's claim
queues on the sweep's lock: the scale harness (``bench_scale.py``) measures that queue; this
measures what grows beneath it.

    python benchmarks/bench_suggest_growth.py                      # 100 and 10,000, 30 reps
    python benchmarks/bench_suggest_growth.py --sizes 100 1000 --reps 10
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import SweepSession, open_session
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.postgres import throwaway_server
from hyperfleet.testing.sweeps import minimal_sweep

SPACE = {
    "x": {"type": "float", "low": 0.0, "high": 1.0},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
}
DISTRIBUTIONS = {"x": FloatDistribution(0.0, 1.0), "lr": FloatDistribution(1e-4, 1e-1, log=True)}


def _sweep(url: str, workdir: str, scheduler: str, size: int) -> SweepSession:
    data = minimal_sweep(
        name=f"{scheduler}-{size}", storage=url, workdir=workdir, space=SPACE,
        budget={"trials": size + 100_000, "max_concurrent": 1, "ahead": 0},
        scheduler={"type": scheduler, "seed": 0},
    )  # fmt: skip
    session = open_session(parse_sweep(data), Storage(url), NullTracker(), None)
    rng = random.Random(size)
    history = []
    for _ in range(size):
        x, lr = rng.random(), 10 ** rng.uniform(-4, -1)
        history.append(create_trial(
            params={"x": x, "lr": lr}, distributions=DISTRIBUTIONS, value=x + lr,
            intermediate_values={1: x + 1.0, 2: x + lr},
        ))  # fmt: skip
    session.scheduler.study.add_trials(history)  # type: ignore[attr-defined]
    return session


def _one(session: SweepSession) -> float:
    started = time.perf_counter()
    suggestion = session.scheduler.suggest()
    assert suggestion is not None
    session.scheduler.on_trial_end(suggestion.trial_number, TrialState.COMPLETE, [0.5])
    return time.perf_counter() - started


def history_reads(session: SweepSession, reps: int = 200) -> tuple[float, float]:
    """One history read (every finished trial, as TPE asks for it) through the platform's
    cache, which keeps the trials in order, and through Optuna's read of the same cache,
    which sorts them at each call: milliseconds each, median, side by side."""
    from optuna.storages._cached_storage import _CachedStorage

    study = session.scheduler.study  # type: ignore[attr-defined]
    cache, sid = study._storage, study._study_id
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    ours: list[float] = []
    optunas: list[float] = []

    def optunas_read(*args: Any) -> Any:
        return _CachedStorage.get_all_trials(cache, *args)

    for _ in range(reps):
        for out, read in ((ours, cache.get_all_trials), (optunas, optunas_read)):
            started = time.perf_counter()
            read(sid, False, states)
            out.append(time.perf_counter() - started)
    return 1000 * statistics.median(ours), 1000 * statistics.median(optunas)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--schedulers", nargs="+", default=["random", "tpe"])
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    reads: tuple[int, float, float] | None = None
    with throwaway_server("hyperfleet-growth-") as server:
        url = f"{server}/postgres"
        workdir = tempfile.mkdtemp(prefix="hyperfleet-growth-")
        for scheduler in args.schedulers:
            sessions = {n: _sweep(url, workdir, scheduler, n) for n in args.sizes}
            for s in sessions.values():  # warm: the cache read once, the sampler imported
                _one(s)
            times: dict[int, list[float]] = {n: [] for n in args.sizes}
            for _ in range(args.reps):  # side by side: one of each length per round
                for n, s in sessions.items():
                    times[n].append(_one(s))
            for n in args.sizes:
                rows.append({"scheduler": scheduler, "size": n,
                             "ms": 1000 * statistics.median(times[n])})  # fmt: skip
            if scheduler == "tpe":
                longest = max(args.sizes)
                reads = (longest, *history_reads(sessions[longest]))
            for s in sessions.values():
                s.storage.close()
    print("| scheduler | finished trials | suggest + end, median | ratio to the shortest |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        first = next(x for x in rows if x["scheduler"] == r["scheduler"])
        print(f"| {r['scheduler']} | {r['size']:,} | {r['ms']:.1f} ms | "
              f"{r['ms'] / first['ms']:.2f}x |")  # fmt: skip
    if reads:
        n, ours, optunas = reads
        print(f"\nA read of the {n:,} finished trials (TPE's), median: through the platform's "
              f"cache {ours:.2f} ms, Optuna's sorted read of it {optunas:.2f} ms "
              f"({optunas / ours:.1f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
