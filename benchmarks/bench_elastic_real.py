"""Elastic trials on real training: an ASHA sweep of digits trials on this machine's CPU slots,
fixed-size against elastic, side by side in one run.

Both sweeps are ``hyperfleet sweep run`` with ``--devices cpu:SLOTS``, the same seeded search
(TPE, ASHA with reduction factor 3), the same trials; fixed: ``devices: 1``; elastic:
``devices: {min: 1, max: SLOTS}`` (the policy of ``docs/elastic.md``). The figures come from
the storage's lease rows (``hf_leases``: which devices each launch of a trial held, from its
claim to its release), so a resize shows as a trial's launches at different sizes:

- **utilisation**: device-seconds held / (SLOTS x the span from the first claim to the last
  release), over the whole sweep and over its tail (from when fewer trials remain unfinished
  than there are slots);
- **best done at**: seconds from the first claim until the trial with the best value ended;
- **wall**: the command's wall time; **best**: the sweep's best value; **sizes**: the number
  of distinct sizes its launches held (1 for a sweep that never resized).

Runs alternate (fixed, elastic, fixed, ...) within each round.

    python benchmarks/bench_elastic_real.py            # 12 trials of 6,000 steps, 4 slots, 2 rounds
    python benchmarks/bench_elastic_real.py --quick    # 6 trials of 300 steps, 1 round
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.side_by_side import hyperfleet_sweep, machine
from hyperfleet.platform.storage import Storage

OBJECTIVE = "val_accuracy"  # maximised


def sweep(trials: int, steps: int, slots: int, elastic: bool, batch: int) -> dict[str, Any]:
    devices: Any = {"min": 1, "max": slots} if elastic else 1
    return {
        "objective": {"metric": OBJECTIVE, "mode": "max"},
        "scheduler": {"type": "tpe", "seed": 0, "n_startup_trials": 4},
        "pruner": {"type": "asha", "reduction_factor": 3},
        "budget": {"trials": trials, "max_concurrent": slots},
        "space": {"lr": {"type": "float", "low": 3e-3, "high": 3e-2, "log": True}},
        "trial": {
            "workload": "digits",
            "params": {"batch_size": batch, "hidden": 256},
            "steps": steps,
            "eval_every": max(1, steps // 10),
            "resources": {"devices": devices},
        },
    }


def _held(leases: list[Any], start: float, end: float) -> float:
    """Device-seconds the leases held between ``start`` and ``end``."""
    total = 0.0
    for x in leases:
        lo, hi = max(x.started_at, start), min(x.ended_at, end)
        if hi > lo:
            total += len(x.devices) * (hi - lo)
    return total


def measure(workdir: str, name: str, slots: int) -> dict[str, Any]:
    """What the sweep's storage says of its devices and its best trial."""
    storage = Storage.open_readonly(f"sqlite:///{Path(workdir) / 'hf.db'}")
    try:
        leases = [x for x in storage.leases.all(name) if x.ended_at is not None]
        trials = storage.trials.of(name)
    finally:
        storage.close()
    first, last = min(x.started_at for x in leases), max(x.ended_at for x in leases)
    ends = sorted(max(x.ended_at for x in leases if x.trial == t.number) for t in trials)
    tail = ends[len(ends) - slots] if len(ends) >= slots else first  # fewer left than slots
    done = [t for t in trials if t.state == "COMPLETE" and OBJECTIVE in t.metrics]
    best = max(done, key=lambda t: float(t.metrics[OBJECTIVE]))
    best_end = max(x.ended_at for x in leases if x.trial == best.number)
    return {
        "utilisation": _held(leases, first, last) / (slots * (last - first)),
        "tail_utilisation": _held(leases, tail, last) / (slots * (last - tail))
        if last > tail
        else float("nan"),
        "best_done_s": best_end - first,
        "span_s": last - first,
        "best": float(best.metrics[OBJECTIVE]),
        "sizes": len({len(x.devices) for x in leases}),
        "launches": len(leases),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 trials of 300 steps, one round")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--trials", type=int)
    ap.add_argument("--steps", type=int, help="each trial's steps (reports every tenth)")
    ap.add_argument(
        "--batch", type=int, default=64, help="the global batch (a multiple of the slots)"
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    trials, steps, rounds = (6, 300, 1) if args.quick else (12, 6000, 2)
    trials, steps, rounds = args.trials or trials, args.steps or steps, args.rounds or rounds
    results: dict[str, list[dict[str, Any]]] = {"fixed": [], "elastic": []}
    with tempfile.TemporaryDirectory(prefix="hf-elastic-real-") as scratch:
        for r in range(rounds):
            for mode in ("fixed", "elastic"):
                name = f"{mode}-{r}"
                data = sweep(trials, steps, args.slots, mode == "elastic", args.batch)
                run = hyperfleet_sweep(Path(scratch), name, data, f"cpu:{args.slots}")
                figures = {"wall_s": run.wall, **measure(run.out["workdir"], name, args.slots)}
                results[mode].append(figures)
                print(f"round {r} {mode}: {json.dumps(figures)}", flush=True)
    keys = ("utilisation", "tail_utilisation", "best_done_s", "wall_s", "best", "sizes")
    print(f"\n{trials} digits trials of {steps} steps (batch {args.batch}), ASHA, "
          f"cpu:{args.slots}, {rounds} rounds (medians)")  # fmt: skip
    print("| mode | " + " | ".join(keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    medians = {
        m: {k: statistics.median(x[k] for x in rs) for k in keys} for m, rs in results.items()
    }
    for mode, row in medians.items():
        print(f"| {mode} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")
    fixed, elastic = medians["fixed"], medians["elastic"]
    print(f"\nelastic / fixed: wall {elastic['wall_s'] / fixed['wall_s']:.2f}x, best done "
          f"{elastic['best_done_s'] / fixed['best_done_s']:.2f}x, utilisation "
          f"{elastic['utilisation']:.1%} vs {fixed['utilisation']:.1%}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "runs": results}, indent=1))


if __name__ == "__main__":
    main()
