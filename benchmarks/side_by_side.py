"""The harness of the side-by-side benchmarks: runs, peers, rounds, machine facts.

Every contender runs as a command of its own, as its user would start it (``hyperfleet sweep
run``; a Ray Tune or Optuna script in that peer's own virtual environment), and is timed from
its start to its exit. Contenders of one benchmark alternate within each round (A B C, A B C,
...), so the machine's load — these machines are shared — falls on all of them alike; the
tables give medians over rounds and ratios of medians.

The peers are installed from the package registry into ``benchmarks/.venvs/<peer>`` on first
use (:func:`peer_python`), never vendored.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / "benchmarks" / ".venvs"
PEERS = ROOT / "benchmarks" / "peers"
#: what each peer's environment installs (pinned: a figure names the version it measured)
PEER_REQUIREMENTS = {"ray": ["ray[tune]==2.60.0"], "optuna": ["optuna==5.1.0"]}


@dataclass
class Run:
    """One timed run: wall seconds from start to exit, and what its last JSON line said."""

    wall: float
    out: dict[str, Any] = field(default_factory=dict)


def peer_python(peer: str) -> str:
    """The interpreter of ``peer``'s own virtual environment, made on first use."""
    venv = VENVS / peer
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = " ".join(PEER_REQUIREMENTS[peer])
    if not marker.exists() or marker.read_text() != wanted:
        print(f"setting up {peer}: {wanted} into {venv}", flush=True)
        if not python.exists():  # from the base interpreter: a venv of its own, not nested
            base = getattr(sys, "_base_executable", None) or shutil.which("python3")
            subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *PEER_REQUIREMENTS[peer]], check=True)
        marker.write_text(wanted)
    return str(python)


def timed(cmd: list[str], *, cwd: Path, env: Mapping[str, str] | None = None,
          timeout: float = 1800) -> Run:  # fmt: skip
    """Run ``cmd`` to its end; its wall time and its last JSON line (``{}`` if none)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:6])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    out: dict[str, Any] = {}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            out = json.loads(line)
            break
    return Run(wall, out)


def rounds(contenders: Mapping[str, Callable[[int], Run]], n: int) -> dict[str, list[Run]]:
    """``n`` rounds, each running every contender once, in turn; runs per contender."""
    runs: dict[str, list[Run]] = {name: [] for name in contenders}
    for r in range(n):
        for name, run in contenders.items():
            got = run(r)
            runs[name].append(got)
            print(f"  round {r + 1}/{n} {name}: {got.wall:.2f} s", flush=True)
    return runs


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# -- hyperfleet sweeps ---------------------------------------------------------------------


def mlflow_template(scratch: Path) -> Path:
    """An empty MLflow SQLite store with its schema made, copied into every hyperfleet run:
    the runs measure a sweep on an existing store (a user's second sweep), not MLflow's
    one-time schema migrations."""
    path = scratch / "mlflow-template.db"
    if not path.exists():
        code = (
            "from mlflow.tracking import MlflowClient;"
            f"MlflowClient(tracking_uri='sqlite:///{path}').search_experiments()"
        )
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


def hyperfleet_sweep(scratch: Path, name: str, sweep: dict[str, Any], devices: str,
                     env: Mapping[str, str] | None = None) -> Run:  # fmt: skip
    """``hyperfleet sweep run`` of ``sweep`` in a fresh directory of its own (its own
    storage, a copy of the MLflow template); wall time and its JSON summary."""
    work = scratch / f"{name}-{time.monotonic_ns()}"
    work.mkdir(parents=True)
    shutil.copy(mlflow_template(scratch), work / "mlflow.db")
    data = {
        **sweep,
        "name": name,
        "storage": f"sqlite:///{work / 'hf.db'}",
        "tracking": {"uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": name},
        "workdir": str(work),
    }
    path = work / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
           "--devices", devices]  # fmt: skip
    run = timed(cmd, cwd=work, env=env)
    run.out["workdir"] = str(work)
    return run


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import mlflow
    import optuna
    import torch

    load = os.getloadavg()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(load[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "mlflow": mlflow.__version__,
        "peers": {k: " ".join(v) for k, v in PEER_REQUIREMENTS.items()},
    }
