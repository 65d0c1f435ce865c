"""A sweep's first run in a new working directory: its MLflow store made by MLflow's migrations
against a copy of the migrated template (``hyperfleet.platform.tracking.seed``), side by side.

Each round runs the same command twice, in two fresh directories, in alternating order: the
quickstart-sized minimal sweep (two in-process trials of the quadratic workload, four steps) with
``hyperfleet sweep run``; once with the template cache usable, once with ``XDG_CACHE_HOME``
pointing at a file (no cache: MLflow migrates the new store, as before the template). Wall and
CPU time (the command and its children) are measured per run; medians and their ratios print.

    python benchmarks/bench_first_sweep.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyperfleet.testing.sweeps import minimal_sweep

HYPERFLEET = [sys.executable, "-m", "hyperfleet.platform"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def first_run(root: Path, cache: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``sweep run`` in the new directory ``root``."""
    root.mkdir()
    (root / "sweep.yaml").write_text(yaml.safe_dump(minimal_sweep(name="first")))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([*HYPERFLEET, "sweep", "run", "sweep.yaml"], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - start, _children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cache, blocked = base / "cache", base / "no-cache"
        blocked.write_text("")  # a file: the template cannot be kept, MLflow migrates
        first_run(base / "warm-up", cache)  # makes the template (MLflow's migrations, once)
        runs: dict[str, list[tuple[float, float]]] = {"template": [], "migrations": []}
        for i in range(args.rounds):
            order = [("template", cache), ("migrations", blocked)]
            for name, where in order if i % 2 == 0 else order[::-1]:
                runs[name].append(first_run(base / f"{name}-{i}", where))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in runs.items()}  # fmt: skip
    print(f"first `sweep run` in a new directory, median of {args.rounds} rounds each")
    print(f"{'store':<12} {'wall s':>8} {'CPU s':>8}")
    for name, (wall, cpu) in med.items():
        print(f"{name:<12} {wall:8.2f} {cpu:8.2f}")
    (tw, tc), (mw, mc) = med["template"], med["migrations"]
    print(f"template / migrations: wall {tw / mw:.2f}, CPU {tc / mc:.2f}")


if __name__ == "__main__":
    main()
