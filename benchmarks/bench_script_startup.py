"""A script trial's start-up beside a function trial's, side by side.

Each round runs two small sweeps, in alternating order, each in a fresh directory: the minimal
sweep's ``quadratic`` workload as a function trial on one device (the warm torchrun group that
sweeps use: its second trial runs in the processes the first left), and the same one-report
computation as a script trial (``trial.command``: a program that imports torch, as a training
script does, and prints ``loss=...``; its runner and program start for every trial). Per trial:
seconds from its start to its end in storage, i.e. its start-up, since the work is nothing; per
sweep: the wall time of ``sweep run`` and the CPU of it and its children. Medians and ratios.

    python benchmarks/bench_script_startup.py [--rounds 3] [--trials 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep

HYPERFLEET = [sys.executable, "-m", "hyperfleet.platform"]
PROGRAM = """import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float)
x = parser.parse_args().x
print(f"step=1 loss={float(torch.tensor((x - 0.3) ** 2 + 1.0))}", flush=True)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sweep(root: Path, kind: str, trials: int) -> dict[str, Any]:
    root.mkdir()
    trial: dict[str, Any] = {"steps": 1, "resources": {"devices": 1}}
    if kind == "script":
        (root / "train.py").write_text(PROGRAM)
        trial.update(workload=None, command=["python", "train.py", "${args}"])
    data = minimal_sweep(name=kind, budget={"trials": trials, "max_concurrent": 1}, trial=trial)
    data["tracking"] = {"uri": "sqlite:///runs/mlflow.db", "log_model": False}
    data.update(storage="sqlite:///runs/hf.db", workdir="runs")
    (root / "sweep.yaml").write_text(yaml.safe_dump(data))
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([*HYPERFLEET, "sweep", "run", "sweep.yaml", "--devices", "cpu:1"], cwd=root,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    storage = Storage(f"sqlite:///{root / 'runs' / 'hf.db'}", create=False)
    done = [t for t in storage.trials.of(kind) if t.started_at and t.ended_at]
    storage.close()
    assert len(done) == trials, f"{kind}: {len(done)} of {trials} trials ended"
    seconds = sorted(done, key=lambda t: t.number)
    return {
        "wall": wall,
        "cpu": cpu,
        "first": (seconds[0].ended_at or 0) - (seconds[0].started_at or 0),
        "later": statistics.median((t.ended_at or 0) - (t.started_at or 0) for t in seconds[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"function": [], "script": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["function", "script"] if i % 2 == 0 else ["script", "function"]
            for kind in order:
                runs[kind].append(sweep(Path(tmp) / f"{kind}-{i}", kind, args.trials))
    keys = ("first", "later", "wall", "cpu")
    med = {k: {f: statistics.median(r[f] for r in v) for f in keys} for k, v in runs.items()}
    print(f"{args.trials}-trial sweeps of one report each, median of {args.rounds} rounds")
    print(f"{'trial':<10} {'first s':>8} {'later s':>8} {'wall s':>8} {'CPU s':>8}")
    for kind, m in med.items():
        print(f"{kind:<10} {m['first']:8.2f} {m['later']:8.2f} {m['wall']:8.2f} {m['cpu']:8.2f}")
    s, f = med["script"], med["function"]
    print("script / function: " + ", ".join(f"{k} {s[k] / f[k]:.2f}" for k in keys))


if __name__ == "__main__":
    main()
