"""What ``greenlet`` (a dependency) saves Optuna's GP sampler: seconds per suggestion, side by side.

Optuna's ``GPSampler`` optimises its acquisition function from several starting points with
L-BFGS-B; with ``greenlet`` installed it runs them as one batch (one evaluation of the model
for all the points at each step), without it one after another (and warns on every sweep).
This times the same suggestions (:func:`benchmarks.bench_suggest.time_suggestions`: a 6-D
Hartmann history of ``n`` finished trials, ``ask`` plus the six ``suggest_float`` calls) in a
fresh interpreter with ``greenlet`` importable and in one where it is not, alternating, and
prints the medians and their ratio.

    python benchmarks/bench_gp_greenlet.py            # n = 10, 100, 300; 3 asks, 2 rounds
    python benchmarks/bench_gp_greenlet.py --quick    # n = 100; 1 ask, 1 round
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, warnings
if {blocked}:
    sys.modules["greenlet"] = None  # import greenlet fails: Optuna's sequential fallback
sys.path.insert(0, {root!r})
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")
from benchmarks.bench_suggest import history, time_suggestions
from optuna._gp import batched_lbfgsb
batched = batched_lbfgsb._greenlet_imports.is_successful()
seconds = time_suggestions({{"type": "gp"}}, history({n}), {k})
print(json.dumps({{"batched": batched, "seconds": seconds}}))
"""


def timed(n: int, k: int, blocked: bool) -> tuple[bool, float]:
    code = CHILD.format(blocked=blocked, root=str(ROOT), n=n, k=k)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return bool(result["batched"]), float(result["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes, k, rounds = ((100,), 1, 1) if args.quick else ((10, 100, 300), 3, 2)
    print(f"GP sampler, seconds per suggestion (median of {k} asks x {rounds} rounds)")
    print(f"{'history':>8} {'batched (greenlet)':>20} {'sequential':>12} {'ratio':>7}")
    for n in sizes:
        runs: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds):
            for blocked in (r % 2 == 1, r % 2 == 0):  # A B, then B A
                batched, seconds = timed(n, k, blocked)
                assert batched == (not blocked), "greenlet was (not) importable as intended"
                runs[batched].append(seconds)
        fast, slow = statistics.median(runs[True]), statistics.median(runs[False])
        print(f"{n:>8} {fast:>19.3f}s {slow:>11.3f}s {slow / fast:>6.2f}x")


if __name__ == "__main__":
    main()
