"""Elastic trials against fixed-size ones: one ASHA sweep on the simulated launcher, both ways.

The same sweep (:mod:`benchmarks.elastic_sim`: seeded random sampler, Optuna's successive
halving, simulated trials on a virtual clock) runs twice in one process: every trial on
``--low`` devices from its first step to its last (fixed), and every trial elastic between
``--low`` and ``--high`` devices under the policy of
:mod:`hyperfleet.platform.elastic.resize` (elastic). Printed for each: the share of
device-seconds held by trials over the whole sweep and over its tail (from when fewer trials
remain unfinished than there are devices), the virtual time until the best trial completed,
the sweep's virtual wall time, the best value and the resizes made. Virtual time costs no
wall time: the full size runs in seconds to a minute.

    python benchmarks/bench_elastic.py            # 64 devices, 500 trials
    python benchmarks/bench_elastic.py --quick    # 8 devices, 40 trials
    python benchmarks/bench_elastic.py --share 1  # the policy giving the best-ranked all
    python benchmarks/bench_elastic.py --seed 3   # another draw of the sweep
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.elastic_sim import Case, Result, run_case

QUICK = Case(devices=8, trials=40, steps=27, high=8)
FULL = Case()
TARGET_TAIL = 0.95
"""The tail utilisation an elastic sweep is to reach at the full size."""


def compare(case: Case) -> dict[str, Result]:
    return {"fixed": run_case(case, elastic=False), "elastic": run_case(case, elastic=True)}


def table(case: Case, results: dict[str, Result]) -> str:
    head = (
        f"ASHA sweep, {case.trials} trials of {case.steps} steps (eta {case.eta}), "
        f"{case.devices} devices; fixed: {case.low} device(s) a trial; elastic: "
        f"{{min: {case.low}, max: {case.high}}}, min_interval {case.min_interval} reports, "
        f"share {case.share:g}, seed {case.seed}, "
        f"{case.launch_s:g} s a relaunch (virtual time)"
    )
    rows = [
        "| mode | utilisation | tail utilisation | tail from | best done at | wall | "
        "best value | resizes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results.values():
        rows.append(
            f"| {r.mode} | {r.utilisation:.1%} | {r.tail_utilisation:.1%} | "
            f"{r.tail_start_s:,.0f} s | {r.best_done_s:,.0f} s | {r.wall_s:,.0f} s | "
            f"{r.best_value:.4f} | {r.resizes} |"
        )
    fixed, elastic = results["fixed"], results["elastic"]
    ratios = (
        f"elastic / fixed: wall {elastic.wall_s / fixed.wall_s:.2f}x, best done "
        f"{elastic.best_done_s / fixed.best_done_s:.2f}x, tail utilisation "
        f"{elastic.tail_utilisation:.1%} against {fixed.tail_utilisation:.1%}"
    )
    return "\n".join([head, "", *rows, "", ratios])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 devices, 40 trials")
    parser.add_argument("--devices", type=int, help="devices in the pool")
    parser.add_argument("--trials", type=int, help="trials of the sweep")
    parser.add_argument("--high", type=int, help="an elastic trial's max devices")
    parser.add_argument("--share", type=float, help="the policy's share (1: all to the best)")
    parser.add_argument("--seed", type=int, help="the sampler's seed (default 0)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    case = QUICK if args.quick else FULL
    names = ("devices", "trials", "high", "share", "seed")
    changes = {k: v for k, v in vars(args).items() if k in names and v is not None}
    case = replace(case, **changes)
    started = time.perf_counter()
    results = compare(case)
    print(table(case, results))
    print(f"\n({time.perf_counter() - started:.1f} s of wall time for both runs)")
    elastic = results["elastic"].tail_utilisation
    verdict = "meets" if elastic >= TARGET_TAIL else "misses"
    print(f"elastic tail utilisation {elastic:.1%} {verdict} the {TARGET_TAIL:.0%} target")
    if args.json:
        data = {"case": asdict(case), "results": {k: asdict(v) for k, v in results.items()}}
        args.json.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
