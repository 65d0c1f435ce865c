"""Scale: claims, PostgreSQL load and scheduler cost with up to 1,000 workers and 10,000-trial
sweeps, on one real PostgreSQL, with simulated trials (:mod:`benchmarks.scale_harness`).

Each case runs real worker control loops (threads of spawned processes, 50 to a process,
each started as a ``hyperfleet worker`` is: the claim under the sweep's lock, the heartbeat,
the reports through rank 0's recorder) against a throwaway PostgreSQL
server, and reports claim latency (p50, p99), trials claimed twice, transactions per second,
connections held (and per worker), lock waits, suggestion time and the platform's own time per
trial for the first and the last 100 trials of the sweep, and the share of the workers' time
spent in the platform.

    python benchmarks/bench_scale.py --full         # the sizes of docs/benchmarks/scale.md
    python benchmarks/bench_scale.py --quick        # a few minutes: 1-16 workers, 100-1,000
    python benchmarks/bench_scale.py --case random:64:1000  # one case (scheduler:workers:trials)
    python benchmarks/bench_scale.py --case random:16:10000:0.4  # ... and its trials' seconds
    python benchmarks/bench_scale.py --full --json benchmarks/results/scale.json
    python benchmarks/bench_scale.py --case random:1000:2000:120 --ramp-s 0  # all at once

Trial length: each case's trials last about ``--trial-per-worker`` x workers seconds (a
spread of +-50 %), so every case keeps its workers busy for about the same wall time and the
claim rate stays near ``1 / --trial-per-worker`` (12.5) trials per second whatever the fleet's
size (a larger fleet runs longer trials, as a real one does); ``--trial-s`` fixes it instead.
Workers join over ``--ramp-s`` seconds (as a cluster's scheduler starts jobs; 0: at once),
by default 10 a second (``JOIN_PER_S``: 1,000 workers over 100 s). Every simulated worker
runs on this machine: a worker's start (its registration, heartbeat, first look, claim,
launch and its trial's recorder) costs this machine's CPU, where a real worker's costs its
own host's. On 2 cores, 100 joining a second needed more CPU than the machine has (1,000
workers: a load near 100 for a minute, claims waiting up to 41 s behind the machine's CPU
queue, not the platform); 10 a second leave it about half idle. Each case reports the
machine's busy share (whole case, and its busiest 5 s): near 100 %, every figure of that
case includes the CPU queue. Claims are reported for the start-up wave (each worker's first)
and the steady state apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale_harness import SCHEDULERS, SLOW_S, CaseResult, postgres, run_case

# (scheduler, workers, trials, trial seconds or None: --trial-per-worker x workers): the
# fleet's sizes on a 1,000-trial random sweep, then the sweep's length with each scheduler
FULL: list[tuple[str, int, int, float | None]] = [
    *[("random", w, 1000, None) for w in (1, 16, 64, 256)],
    # 1,000 workers on 5-minute trials (+-50 %): a fleet's claim rate of 3.3 a second, twice
    # a real 1,000-GPU fleet's of 10-minute trials (1.7); 1,500 trials: 500 steady claims
    ("random", 1000, 1500, 300.0),
    # 10,000 trials on 16 workers of 0.4 s trials: near the claim lock's capacity on an idle
    # 2-core machine, so the sweep's length, not a queue, is what grows (the wait is told apart)
    ("random", 16, 10000, 0.4),
    ("tpe", 16, 10000, 0.4),
    ("gp", 16, 300, 0.2),
    ("pbt", 16, 1000, 0.2),
]
QUICK: list[tuple[str, int, int, float | None]] = [
    ("random", 1, 100, None),
    ("random", 16, 100, None),
    ("random", 64, 200, None),
    ("tpe", 16, 300, 0.2),
    ("gp", 4, 60, 0.2),
    ("pbt", 8, 100, 0.2),
]
SMALLEST: list[tuple[str, int, int, float | None]] = [("random", 2, 6, 0.1)]


def parse_case(text: str) -> tuple[str, int, int, float | None]:
    """``scheduler:workers:trials`` or ``scheduler:workers:trials:trial_seconds``."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[0] not in SCHEDULERS:
        raise SystemExit(
            f"--case: {text!r}; write scheduler:workers:trials[:trial_seconds] with a "
            f"scheduler of {', '.join(SCHEDULERS)}"
        )
    trial_s = float(parts[3]) if len(parts) == 4 else None
    return parts[0], int(parts[1]), int(parts[2]), trial_s


def trial_length(args: argparse.Namespace, workers: int, given: float | None) -> float:
    if args.trial_s:
        return float(args.trial_s)
    return given if given is not None else max(0.02, args.trial_per_worker * workers)


JOIN_PER_S = 10.0
"""Workers join at this rate by default (see the module docstring)."""


def ramp(args: argparse.Namespace, workers: int) -> float:
    return float(args.ramp_s) if args.ramp_s is not None else workers / JOIN_PER_S


def table(results: list[CaseResult]) -> str:
    head = (
        "| scheduler | workers | trials | wall | claim p50 | claim p99 | claimed twice "
        "| xact/s | connections (per worker) | lock waits | suggest first/last 100 "
        "| platform per trial first/last 100 | in platform |"
    )
    rows = [head, "|" + " --- |" * 13]
    for r in results:
        ratio = r.platform_last_ms / r.platform_first_ms if r.platform_first_ms else float("nan")
        rows.append(
            f"| {r.scheduler} | {r.workers:,} | {r.trials:,} | {r.wall_s:.0f} s "
            f"| {r.claim_p50_ms:.1f} ms | {r.claim_p99_ms:.1f} ms | {r.claimed_twice} "
            f"| {r.xact_per_s:,.0f} | {r.connections_max} ({r.connections_per_worker:.2f}) "
            f"| {100 * r.lock_wait_samples:.0f} % of samples, max {r.lock_waits_max} "
            f"| {r.suggest_first_ms:.1f} / {r.suggest_last_ms:.1f} ms "
            f"| {r.platform_first_ms:.1f} / {r.platform_last_ms:.1f} ms ({ratio:.2f}x) "
            f"| {100 * r.waiting_share:.1f} % |"
        )
    return "\n".join(rows)


def waits_table(results: list[CaseResult]) -> str:
    """The queue told apart from the history: the claim lock's wait, the platform's time
    less it (first and last 100 trials), the suggestion's own CPU (its thread's: the rest of
    its time is database round trips and waits for its process's interpreter lock), and
    row-lock waits (a PBT population's)."""
    rows = [
        "| scheduler | workers | trials | claim-lock wait first/last 100 "
        "| platform per trial less that wait, first/last 100 "
        "| suggestion's CPU first/last 100 | row-lock waits |",
        "|" + " --- |" * 7,
    ]
    for r in results:
        first, last = r.platform_nowait_first_ms, r.platform_nowait_last_ms
        ratio = last / first if first else float("nan")
        rows.append(
            f"| {r.scheduler} | {r.workers:,} | {r.trials:,} "
            f"| {r.claim_wait_first_ms:.1f} / {r.claim_wait_last_ms:.1f} ms "
            f"| {first:.1f} / {last:.1f} ms ({ratio:.2f}x) "
            f"| {r.suggest_cpu_first_ms:.1f} / {r.suggest_cpu_last_ms:.1f} ms "
            f"| {100 * r.row_wait_samples:.0f} % of samples, max {r.row_waits_max} |"
        )
    return "\n".join(rows)


def claims_table(results: list[CaseResult]) -> str:
    """The start-up wave (each worker's first claim) told apart from the steady state (every
    later claim), the steady claims' p99 split into the claim lock's wait and the rest, and
    where open transactions spent the case (PostgreSQL running a statement, or waiting on
    their client: its CPU, its interpreter's lock)."""
    rows = [
        "| scheduler | workers | trials | trial length | ramp | start-up wave p50 / p99 "
        "| steady p50 / p99 (claims) | steady p99: lock wait / less the wait "
        "| connections per worker | sessions in a statement / in a transaction on the client "
        "| ahead | claims without the lock | refills: total, p99 | launched again "
        "| sweep created in | machine busy: mean / busiest 5 s | loops failed |",
        "|" + " --- |" * 17,
    ]
    for r in results:
        rows.append(
            f"| {r.scheduler} | {r.workers:,} | {r.trials:,} | {r.trial_s:g} s | {r.ramp_s:g} s "
            f"| {r.claim_first_p50_ms:.1f} / {r.claim_first_p99_ms:.1f} ms "
            f"| {r.claim_steady_p50_ms:.1f} / {r.claim_steady_p99_ms:.1f} ms "
            f"({r.claims_steady:,}) "
            f"| {r.claim_steady_wait_p99_ms:.1f} / {r.claim_steady_inside_p99_ms:.1f} ms "
            f"| {r.connections_per_worker:.3f} | {r.in_server_mean:.1f} / {r.on_client_mean:.1f} "
            f"| {'default' if r.ahead is None else r.ahead} | {r.claims_lockfree:,} of "
            f"{r.claims:,} | {r.refill_total_s:.1f} s, {r.refill_p99_ms:.1f} ms "
            f"| {r.launched_again} | {r.submit_s:.2f} s "
            f"| {100 * r.cpu_busy_mean:.0f} / {100 * r.cpu_busy_peak:.0f} % "
            f"| {r.loops_failed}{'' if not r.loops_failed else f' ({r.first_loop_error})'} |"
        )
    return "\n".join(rows)


def slow_table(results: list[CaseResult]) -> str:
    """The claims over ``SLOW_S`` told apart: how many a garbage collection of their own
    process overlapped (the collection held that process's interpreter lock), the
    processes' collections of 5 ms or more, and the machine's most runnable threads."""
    rows = [
        f"| scheduler | workers | trials | claims over {1000 * SLOW_S:.0f} ms "
        "| of them during a collection of their process | collections of 5 ms or more: count, "
        "longest, in all | runnable threads, most in a sample |",
        "|" + " --- |" * 7,
    ]
    for r in results:
        rows.append(
            f"| {r.scheduler} | {r.workers:,} | {r.trials:,} | {r.claims_slow} of {r.claims:,} "
            f"| {r.claims_slow_in_gc} | {r.gc_pauses:,}, {r.gc_pause_max_ms:.0f} ms, "
            f"{r.gc_pause_total_s:.1f} s | {r.runnable_max:.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="every size of docs/benchmarks/scale.md")
    size.add_argument("--quick", action="store_true", help="small sizes (default)")
    size.add_argument("--smallest", action="store_true", help="one tiny case (the test)")
    size.add_argument(
        "--case", action="append", type=parse_case, help="scheduler:workers:trials[:trial_seconds]"
    )
    ap.add_argument("--trial-per-worker", type=float, default=0.08, help="seconds (see above)")
    ap.add_argument("--trial-s", type=float, default=None, help="every trial's length, seconds")
    ap.add_argument(
        "--ramp-s", type=float, default=None,
        help=f"seconds over which the workers join (default: workers / {JOIN_PER_S:g}; 0: at once)",
    )  # fmt: skip
    ap.add_argument(
        "--ahead", type=int, default=None,
        help="the sweeps' budget.ahead (default: theirs, one per 32 live workers; 0: none)",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="write the raw results here")
    args = ap.parse_args(argv)
    cases = args.case or (FULL if args.full else SMALLEST if args.smallest else QUICK)
    results: list[CaseResult] = []
    started, load_at_start = time.time(), os.getloadavg()[0]
    with postgres() as server:
        for scheduler, workers, trials, given in cases:  # a loaded machine: 10k may take 25 min
            r = run_case(server, scheduler, workers, trials,
                         trial_s=trial_length(args, workers, given),
                         ramp_s=ramp(args, workers),
                         timeout_s=max(900.0, 0.15 * trials), ahead=args.ahead)  # fmt: skip
            results.append(r)
            print(json.dumps(r.row()), flush=True)
    print(table(results))
    print(waits_table(results))
    print(claims_table(results))
    print(slow_table(results))
    if args.json:
        raw: dict[str, Any] = {
            "command": " ".join(sys.argv),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "machine": {
                "cores": len(os.sched_getaffinity(0)),
                "python": platform.python_version(),
                "load_at_start": load_at_start,
                "load_at_end": os.getloadavg()[0],
            },
            "results": [r.row() for r in results],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
