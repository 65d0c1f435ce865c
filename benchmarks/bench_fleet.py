"""Scale-out: what a trial's claim, launch and release cost with 1, 4 and 16 workers on one
PostgreSQL storage, and how busy 2 workers keep their devices over a sweep of 60 short trials.

Everything is real: a throwaway PostgreSQL server (``initdb``/``pg_ctl``), ``hyperfleet sweep
submit``, and ``hyperfleet worker`` processes, each with devices of its own. The figures come
from the storage's lease rows (``hf_leases``: which devices each launch of a trial held, from
its claim to its release), so they are the platform's own accounting.

1. **Overhead per trial.** A sweep of no-op in-process trials (``devices: 0``: a report and
   nothing else) run by W workers of one slot each. Per trial: the time its lease was held
   (claim, launch, the empty trial, reap, release) and the slot-seconds the sweep used per
   trial (W x the span from the first claim to the last release / trials), side by side for
   W = 1, 4, 16.
2. **Utilisation.** 60 trials of a workload that sleeps ``--trial-s`` seconds (a short trial's
   device time; several lengths, one sweep each) on 2 workers of one device each (warm
   process groups): busy device-seconds (leases held) / available device-seconds (each
   device from its worker's registration, when it was ready to take trials, to the sweep's
   last release), goal >= 95 %; the share of that spent in the trials' own bodies; and the
   figure counted from the sweep's first claim instead (2 x the span of the leases).

    python benchmarks/bench_fleet.py                # W = 1, 4, 16 x 48 trials; 60 x 2 s, 5 s
    python benchmarks/bench_fleet.py --quick        # W = 1, 4 x 16 trials; 20 x 1 s trials
    python benchmarks/bench_fleet.py --trial-s 2,5,10 --json out.json

Workers each start a Python interpreter (about 3 s of one core here), so with 16 workers on
a 2-core machine most of the 16-worker figure is contention for the cores, not the database:
the table says how many cores the machine has.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from hyperfleet.testing.postgres import new_database, throwaway_server
from hyperfleet.testing.workers import start_worker, worker_command

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def hyperfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "hyperfleet.platform", *args]


def run_fleet(
    server: str,
    scratch: Path,
    name: str,
    sweep: dict[str, Any],
    workers: int,
    devices: str,
) -> list[Any]:
    """Submit ``sweep``, run ``workers`` workers until it is done; its lease rows and the
    workers' rows."""
    from hyperfleet.platform.storage import Storage

    url = new_database(server, prefix="bench_")
    where = scratch / name
    where.mkdir(parents=True)
    sweep = {**sweep, "name": name, "storage": url, "workdir": str(where / "runs"),
             "tracking": {"uri": f"sqlite:///{where / 'mlflow.db'}"}}  # fmt: skip
    path = where / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    subprocess.run(hyperfleet("sweep", "submit", str(path)), check=True, env=ENV,
                   capture_output=True, cwd=where)  # fmt: skip
    procs = []
    cmd = worker_command(url, sweep=name, devices=devices, exit_when_idle="4s", verbose=False)
    for i in range(workers):
        procs.append(start_worker(cmd, log=where / f"worker-{i}.log", env=ENV, cwd=where))
    for p in procs:
        if p.wait(timeout=1800) != 0:
            sys.exit(f"error: a worker exited {p.returncode}; see {where}")
    storage = Storage(url, create=False)
    try:
        trials = storage.trials.of(name)
        states = {t.state for t in trials}
        if len(trials) != sweep["budget"]["trials"] or states != {"COMPLETE"}:
            sys.exit(f"error: sweep {name} ended with {len(trials)} trials in {states}")
        return storage.leases.all(name), storage.workers.all()
    finally:
        storage.close()


def span(leases: list[Any]) -> float:
    return max(x.ended_at for x in leases) - min(x.started_at for x in leases)


NOOP: dict[str, Any] = {
    "objective": {"metric": "score", "mode": "max"},
    "scheduler": {"type": "random", "seed": 0},
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    "trial": {"workload": "benchmarks.workloads:noop", "steps": 1, "eval_every": 1,
              "resources": {"devices": 0}},
}  # fmt: skip


def overhead(server: str, scratch: Path, workers: int, trials: int) -> dict[str, float]:
    sweep = {**NOOP, "budget": {"trials": trials, "max_concurrent": workers}}
    leases, _ = run_fleet(server, scratch, f"noop-w{workers}", sweep, workers, "cpu:1")
    held = [x.ended_at - x.started_at for x in leases]
    return {
        "workers": workers,
        "trials": trials,
        "lease_median_s": statistics.median(held),
        "lease_p90_s": statistics.quantiles(held, n=10)[-1],
        "slot_s_per_trial": workers * span(leases) / trials,
        "trials_per_s": trials / span(leases),
        "workers_used": len({x.worker for x in leases}),
    }


def utilisation(
    server: str, scratch: Path, trials: int, trial_s: float, name: str = "short"
) -> dict[str, float]:
    sweep = {
        "objective": {"metric": "score", "mode": "max"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": trials, "max_concurrent": 2},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"workload": "benchmarks.workloads:sleeper", "steps": 2, "eval_every": 1,
                  "params": {"seconds": trial_s}, "resources": {"devices": 1}},
    }  # fmt: skip
    leases, workers = run_fleet(server, scratch, name, sweep, 2, "cpu:1")
    end = max(x.ended_at for x in leases)
    # A device is available from the moment its worker registered (ready to take trials:
    # its sweeps are open) until the sweep's last trial ended.
    available = sum(len(w.devices) * (end - w.started_at) for w in workers)
    from_first_claim = 2 * span(leases)
    busy = sum(x.ended_at - x.started_at for x in leases)
    return {
        "trials": trials,
        "trial_s": trial_s,
        "span_s": span(leases),
        "utilisation": busy / available,
        "utilisation_from_first_claim": busy / from_first_claim,
        "in_trial_bodies": trials * trial_s / available,
        "registration_skew_s": max(w.started_at for w in workers)
        - min(w.started_at for w in workers),
        "workers_used": len({x.worker for x in leases}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trial-s", default=None, help="trial lengths, e.g. 2,5 (seconds)")
    parser.add_argument("--no-overhead", action="store_true", help="utilisation only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes, trials = ((1, 4), 16) if args.quick else ((1, 4, 16), 48)
    short, lengths = (20, "1") if args.quick else (60, "2,5")
    lengths = args.trial_s or lengths
    scratch = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    out: dict[str, Any] = {"cores": os.cpu_count(), "overhead": [], "utilisation": []}
    with throwaway_server("bench-fleet-pg-") as server:
        for w in () if args.no_overhead else sizes:
            out["overhead"].append(overhead(server, scratch, w, trials))
        for i, trial_s in enumerate(float(x) for x in lengths.split(",")):
            out["utilisation"].append(utilisation(server, scratch, short, trial_s, f"short{i}"))
    shutil.rmtree(scratch, ignore_errors=True)

    print(f"\nClaim + launch + release per trial, no-op in-process trials, PostgreSQL, "
          f"{out['cores']} cores:")  # fmt: skip
    print("  workers  trials  lease held (median, p90)   slot-s / trial   trials/s   used")
    base = out["overhead"][0]["slot_s_per_trial"] if out["overhead"] else 1.0
    for r in out["overhead"]:
        print(
            f"  {r['workers']:7d}  {r['trials']:6d}  {r['lease_median_s'] * 1e3:8.0f} ms "
            f"{r['lease_p90_s'] * 1e3:8.0f} ms   {r['slot_s_per_trial']:8.3f} s "
            f"({r['slot_s_per_trial'] / base:4.1f}x)  {r['trials_per_s']:8.2f}   "
            f"{r['workers_used']:4d}"
        )
    print(f"\nDevice utilisation, {short} trials on 2 workers x 1 device (goal >= 95 %):")
    print("  trial s   span s   busy / available   in trial bodies   from first claim   skew s")
    for u in out["utilisation"]:
        print(f"  {u['trial_s']:7.1f}  {u['span_s']:7.1f}  {100 * u['utilisation']:15.1f} % "
              f"{100 * u['in_trial_bodies']:15.1f} % "
              f"{100 * u['utilisation_from_first_claim']:16.1f} %  "
              f"{u['registration_skew_s']:6.1f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
