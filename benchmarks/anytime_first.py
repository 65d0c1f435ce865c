"""What importing ahead saves: the time to a sweep's first evaluation, with and without.

A trial's first torch optimizer imports ``torch._dynamo`` (and sympy): about 1.5 s of CPU in
every worker's or rank's first trial. hyperfleet's workers and ranks import it on a thread of
their own once ready (``trial_process.import_ahead``). This runs the same anytime sweep
(:mod:`benchmarks.bench_anytime`'s systems) with and without, alternating (A B A B), and
prints each run's first and second evaluation time (seconds from the command's start) and its
evaluations within the budget.

``--code DIR`` compares another revision instead (``DIR``: its ``git archive``, e.g. of
``main``), with importing ahead as a user's sweep has it: each round runs that code and this
tree's, alternating which goes first.

Usage: ``python benchmarks/anytime_first.py [--systems hf-tpe-asha,hf-tpe-asha-inprocess]
[--rounds 3] [--budget 20] [--workload digits] [--code DIR]``.
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
from benchmarks.bench_anytime import ROOT, run_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--systems", default="hf-tpe-asha,hf-tpe-asha-inprocess")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--workload", default="digits")
    ap.add_argument("--code", type=Path, help="another revision's tree, run against this one")
    args = ap.parse_args()
    scratch = Path(os.environ.get("ANYTIME_SCRATCH", "/tmp")) / f"hf-first-{os.getpid()}"
    scratch.mkdir(parents=True)
    prepare_data(args.workload, scratch / "cache")  # the runs' cache, before any clock
    firsts: dict[tuple[str, str], list[float]] = {}
    seconds: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name in args.systems.split(","):
            for ahead in (r % 2 == 0, r % 2 == 1):  # A B, then B A
                label = (("this" if ahead else "--code") if args.code
                         else f"import_ahead={ahead}")  # fmt: skip
                code = args.code if args.code and not ahead else ROOT
                points = run_system(name, args.workload, r, args.budget, scratch,
                                    ahead or bool(args.code), code)  # fmt: skip
                times = [f"{t:.2f}" for t, _ in points[:2]]
                firsts.setdefault((name, label), []).append(points[0][0] if points else 99.0)
                seconds.setdefault((name, label), []).append(
                    points[1][0] if len(points) > 1 else 99.0
                )
                print(
                    f"round {r} {name} {label}: first evaluations at {times} s, "
                    f"{len(points)} evaluations",
                    flush=True,
                )
    shutil.rmtree(scratch, ignore_errors=True)
    for (name, label), ts in sorted(firsts.items()):
        second = seconds[(name, label)]
        print(
            f"{name} {label}: first evaluation median {statistics.median(ts):.2f} s"
            f" ({', '.join(f'{t:.2f}' for t in ts)}), second {statistics.median(second):.2f} s"
            f" ({', '.join(f'{t:.2f}' for t in second)})"
        )


if __name__ == "__main__":
    main()
