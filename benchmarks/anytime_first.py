"""What importing ahead saves: the time to a sweep's first evaluation, with and without.

A trial's first torch optimizer imports ``torch._dynamo`` (and sympy): about 1.5 s of CPU in
every worker's or rank's first trial. hyperfleet's workers and ranks import it on a thread of
their own once ready (``trial_process.import_ahead``). This runs the same anytime sweep
(:mod:`benchmarks.bench_anytime`'s systems) with and without, alternating (A B A B), and
prints each run's first and second evaluation time (seconds from the command's start) and its
evaluations within the budget.

Usage: ``python benchmarks/anytime_first.py [--systems hf-tpe-asha,hf-tpe-asha-inprocess]
[--rounds 3] [--budget 20] [--workload digits]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.anytime_workloads import prepare_data
from benchmarks.bench_anytime import run_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--systems", default="hf-tpe-asha,hf-tpe-asha-inprocess")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--workload", default="digits")
    args = ap.parse_args()
    scratch = Path(os.environ.get("ANYTIME_SCRATCH", "/tmp")) / f"hf-first-{os.getpid()}"
    scratch.mkdir(parents=True)
    prepare_data(args.workload, scratch / "cache")  # the runs' cache, before any clock
    firsts: dict[tuple[str, bool], list[float]] = {}
    for r in range(args.rounds):
        for name in args.systems.split(","):
            for ahead in (r % 2 == 0, r % 2 == 1):  # A B, then B A
                points = run_system(name, args.workload, r, args.budget, scratch, ahead)
                times = [f"{t:.2f}" for t, _ in points[:2]]
                firsts.setdefault((name, ahead), []).append(points[0][0] if points else 99.0)
                print(
                    f"round {r} {name} import_ahead={ahead}: first evaluations at {times} s, "
                    f"{len(points)} evaluations",
                    flush=True,
                )
    shutil.rmtree(scratch, ignore_errors=True)
    for (name, ahead), ts in sorted(firsts.items()):
        print(
            f"{name} import_ahead={ahead}: first evaluation median {statistics.median(ts):.2f} s"
            f" ({', '.join(f'{t:.2f}' for t in ts)})"
        )


if __name__ == "__main__":
    main()
