"""PBT through the platform: exploit cost beside a full relaunch, and PBT vs no PBT on charlm.

Runs ``hyperfleet sweep run`` on examples/pbt_charlm.yaml twice, in one scratch directory:

* **PBT**, as in the file (4 members, lr and dropout explored every ``perturbation_interval``);
* **no PBT**: the same 4 starting configurations and steps, ``perturbation_interval`` past the
  last step, so no member ever exploits or explores.

Both print their best ``val_loss``. From the PBT sweep it also measures, side by side in the
same run and on the same workload:

* **exploit cost**: from an EXPLOIT decision (its lineage event's time) to the member's next
  report (its MLflow metric timestamp): the in-place restart in the same processes (donor's
  checkpoint copied and loaded, workload restarted) plus ``eval_every`` training steps;
* **relaunch cost**: from a member's launch (``hf_trials.started_at``) to its first report: a
  fresh torchrun (interpreter, imports, rendezvous, storage and MLflow clients, model, data)
  plus the same ``eval_every`` training steps.

It prints the medians and their ratio (goal: exploit <= 1/5 of a relaunch).

    python benchmarks/bench_pbt.py            # the example as it is (a few minutes here)
    python benchmarks/bench_pbt.py --quick    # fewer steps (< 60 s on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from hyperfleet.testing.sweeps import write_sweep

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pbt_charlm.yaml"


def sweep_file(directory: Path, name: str, quick: bool, pbt: bool) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = name
    if quick:
        data["trial"]["steps"] = 60
        data["trial"]["eval_every"] = 10
        data["scheduler"]["perturbation_interval"] = 10
    if not pbt:
        data["scheduler"]["perturbation_interval"] = data["trial"]["steps"] + 1
    return write_sweep(data, directory, experiment=name)


def run_sweep(path: Path, devices: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
           "--devices", devices]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=path.parent, env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"sweep {path.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report_times(client: Any, run_id: str, metric: str) -> list[float]:
    """Seconds since the epoch of every report of ``metric`` in the run, ascending."""
    return sorted(m.timestamp / 1000.0 for m in client.get_metric_history(run_id, metric))


def costs(directory: Path, sweep: str) -> tuple[list[float], list[float]]:
    """(decision -> next report) per exploit, (launch -> first report) per member, seconds."""
    from mlflow.tracking import MlflowClient

    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.population import SqlPopulationStore

    storage = Storage(f"sqlite:///{directory / 'runs' / 'hf.db'}")
    client = MlflowClient(tracking_uri=f"sqlite:///{directory / 'runs' / 'mlflow.db'}")
    trials = {t.number: t for t in storage.trials.of(sweep)}
    times = {n: report_times(client, str(t.mlflow_run_id), "val_loss") for n, t in trials.items()}
    exploit = []
    for e in SqlPopulationStore(storage.engine).lineage(sweep):
        after = [t for t in times[e.member] if t >= e.time]
        if e.kind == "exploit" and after:
            exploit.append(after[0] - e.time)
    relaunch = [
        times[n][0] - float(t.started_at)
        for n, t in trials.items()
        if times[n] and t.started_at is not None and t.attempts == 1
    ]
    storage.close()
    return exploit, relaunch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 steps per member (< 60 s)")
    parser.add_argument("--devices", default="cpu:4", help="device pool (one per member)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pbt-") as tmp:
        directory = Path(tmp)
        pbt = run_sweep(sweep_file(directory, "pbt", args.quick, pbt=True), args.devices)
        base = run_sweep(sweep_file(directory, "no-pbt", args.quick, pbt=False), args.devices)
        exploit, relaunch = costs(directory, "pbt")
    steps = 60 if args.quick else yaml.safe_load(EXAMPLE.read_text())["trial"]["steps"]
    print(f"charlm, population 4, {steps} steps per member (same total steps both ways)")
    print(f"  best val_loss with PBT:    {pbt['best']['value']:.4f}  {pbt['best']['params']}")
    print(f"  best val_loss without PBT: {base['best']['value']:.4f}  {base['best']['params']}")
    print(f"  PBT better: {pbt['best']['value'] < base['best']['value']}")
    if not exploit or not relaunch:
        print("exploit cost: no exploit happened in this run (nothing to measure)")
        return
    e, r = statistics.median(exploit), statistics.median(relaunch)
    print("time to the next report (both include eval_every training steps)")
    print(f"  after an EXPLOIT decision, in place: median {e:.3f} s over {len(exploit)} exploits")
    print(f"  after a fresh torchrun launch:       median {r:.3f} s over {len(relaunch)} launches")
    print(f"  exploit / relaunch = {e / r:.3f}  (goal <= 0.2)")


if __name__ == "__main__":
    main()
