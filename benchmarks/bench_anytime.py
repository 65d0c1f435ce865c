"""Time to a good model: best-so-far against wall time, hyperfleet and its peers on real training.

Every system runs the same training code (:mod:`benchmarks.anytime_workloads`) on the same
devices (2 CPU slots: two trials at a time, one torch thread each), for the same wall budget,
counted from the start of the system's command (start-up and overhead count against it), with
several seeds. The training code appends each evaluation's ``val_loss`` with its time to a log,
so every system is read alike: the best model found at each moment. Systems:

- hyperfleet (``hyperfleet sweep run``, warm torchrun trials, one CPU slot each): ``random``,
  ``tpe``, ``tpe`` with ASHA (:data:`RECOMMENDED`) and with Hyperband, ``gp`` and ``skopt``
  with ASHA, ``pbt``; and ``tpe`` with ASHA as in-process trials (``devices: 0``);
- Ray Tune (:mod:`benchmarks.peers.ray_anytime`): ASHA with random search, ASHA with
  ``OptunaSearch``, PBT; plain Optuna (:mod:`benchmarks.peers.optuna_anytime`): TPE with its
  Hyperband pruner, ``n_jobs=2``; SMAC3 (:mod:`benchmarks.peers.smac_anytime`): its
  multi-fidelity facade, two Dask workers. Peers run from the ``bench`` extra (``pip install
  -e ".[bench]"``); a system whose library is missing is left out with a line saying so.

Output (``benchmarks/results/anytime-<size>.{json,md}``, ``anytime-<size>-<workload>.png``):
per workload the median best-so-far over seeds against time with the spread (min to max), and
a table of each system's median best at 25, 50 and 100 % of the budget and the time its
median curve needs to reach the best peer's final median.

Usage: ``python benchmarks/bench_anytime.py [--size quick|full|smallest] [--systems a,b]
[--workloads digits,charlm] [--budget S] [--seeds N]``. ``--size full`` (``make bench-full``)
takes about 20 minutes on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.anytime_workloads import EVAL_EVERY, SPACES, STEPS, prepare_data
from benchmarks.side_by_side import ROOT, machine, mlflow_template
from hyperfleet.platform.launcher.trial_process import IMPORT_AHEAD_ENV

RESULTS = ROOT / "benchmarks" / "results"
#: hyperfleet's recommended configuration (docs/schedulers.md, "Which scheduler"; hyperfleet init)
RECOMMENDED = "hf-tpe-asha"
#: (workloads, seeds, wall budget per workload in s, systems; None: every system). ``full``:
#: the recommended configuration and every peer, both workloads, 3 seeds (36 runs of ~35 s,
#: budgets where start-up (~4 s idle) is a tenth); ``--systems`` adds hyperfleet's others.
SIZES: dict[str, tuple[list[str], list[int], dict[str, float], list[str] | None]] = {
    "smallest": (["digits"], [0], {"digits": 45.0}, [RECOMMENDED, "optuna-tpe-hyperband"]),
    "quick": (["digits"], [0], {"digits": 20.0}, [RECOMMENDED, "optuna-tpe-hyperband"]),
    "full": (["digits", "charlm"], [0, 1, 2], {"digits": 30.0, "charlm": 30.0},
             [RECOMMENDED, "ray-asha-random", "ray-asha-optuna", "ray-pbt",
              "optuna-tpe-hyperband", "smac-multifidelity"]),
}  # fmt: skip
#: hyperfleet's systems: the sweep file's ``scheduler`` and ``pruner`` (``min_resource: auto``
#: is the step of a trial's first report, ``trial.eval_every``)
HYPERFLEET: dict[str, dict[str, Any]] = {
    "hf-random": {"scheduler": {"type": "random"}},
    "hf-tpe": {"scheduler": {"type": "tpe"}},
    "hf-tpe-asha": {"scheduler": {"type": "tpe"}, "pruner": {"type": "asha"}},
    "hf-tpe-hyperband": {"scheduler": {"type": "tpe"}, "pruner": {"type": "hyperband"}},
    "hf-gp-asha": {"scheduler": {"type": "gp"}, "pruner": {"type": "asha"}},
    "hf-skopt-asha": {"scheduler": {"type": "skopt"}, "pruner": {"type": "asha"}},
    "hf-pbt": {"scheduler": {"type": "pbt", "population": 4}},
    "hf-tpe-asha-inprocess": {"scheduler": {"type": "tpe"}, "pruner": {"type": "asha"},
                              "devices": 0},
}  # fmt: skip
#: peers: the script under benchmarks/peers and its extra arguments, and the module it needs
PEERS: dict[str, tuple[str, list[str], str]] = {
    "ray-asha-random": ("ray_anytime.py", ["asha"], "ray"),
    "ray-asha-optuna": ("ray_anytime.py", ["asha-optuna"], "ray"),
    "ray-pbt": ("ray_anytime.py", ["pbt"], "ray"),
    "optuna-tpe-hyperband": ("optuna_anytime.py", [], "optuna"),
    "smac-multifidelity": ("smac_anytime.py", [], "smac"),
}
#: past the budget, a system's command is stopped (SIGTERM, then SIGKILL 5 s later): only
#: evaluations within the budget count, and a sweep's own timeout counts from its own start
GRACE_S = 1.0


def hyperfleet_command(name: str, workload: str, seed: int, budget: float,
                       work: Path) -> list[str]:  # fmt: skip
    """``hyperfleet sweep run`` of system ``name``'s sweep, written into ``work``."""
    system = HYPERFLEET[name]
    scheduler = {**system["scheduler"], "seed": seed}
    params: dict[str, Any] = {}
    if scheduler["type"] == "pbt":
        scheduler["perturbation_interval"] = 2 * EVAL_EVERY[workload]
        params["checkpoints"] = True
    pruner = dict(system.get("pruner", {}))
    shutil.copy(mlflow_template(work.parent), work / "mlflow.db")
    sweep = {
        "name": f"{name}-{workload}-{seed}",
        "objective": {"metric": "val_loss", "mode": "min"},
        "scheduler": scheduler,
        **({"pruner": pruner} if pruner else {}),
        "budget": {"max_concurrent": 2, "timeout": budget, "stop_at_timeout": True},
        "space": SPACES[workload],
        "trial": {"workload": f"benchmarks.anytime_workloads:hyperfleet_{workload}",
                  "params": params, "steps": STEPS[workload],
                  "eval_every": EVAL_EVERY[workload],
                  "resources": {"devices": system.get("devices", 1)}},
        "storage": f"sqlite:///{work / 'hf.db'}",
        "tracking": {"uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": name},
        "workdir": str(work),
    }  # fmt: skip
    path = work / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path),
            "--devices", "cpu:2"]  # fmt: skip


def command(name: str, workload: str, seed: int, budget: float, work: Path) -> list[str]:
    if name in HYPERFLEET:
        return hyperfleet_command(name, workload, seed, budget, work)
    script, extra, _ = PEERS[name]
    peer = ROOT / "benchmarks" / "peers" / script
    return [sys.executable, str(peer), workload, str(seed), str(budget), *extra]


def available(name: str) -> bool:
    return name in HYPERFLEET or importlib.util.find_spec(PEERS[name][2]) is not None


def run_system(name: str, workload: str, seed: int, budget: float, scratch: Path,
               import_ahead: bool = True,
               code: Path = ROOT) -> list[tuple[float, float]]:  # fmt: skip
    """One run of system ``name``: its ``(seconds, val_loss)`` evaluations, in time order.
    ``import_ahead``: False turns off hyperfleet's workers importing ahead (``trial_process.
    import_ahead``), to measure what it saves; True runs them as a user's sweep does.
    ``code``: the tree whose hyperfleet runs (another revision's ``git archive``)."""
    work = scratch / f"{name}-{workload}-{seed}-{time.monotonic_ns()}"
    work.mkdir(parents=True)
    log = work / "anytime.log"
    cmd = command(name, workload, seed, budget, work)
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "HYPERFLEET_CACHE": str(scratch / "cache"),
           "ANYTIME_LOG": str(log), "ANYTIME_T0": repr(time.time())}  # fmt: skip
    env.pop(IMPORT_AHEAD_ENV, None)
    if not import_ahead:
        env[IMPORT_AHEAD_ENV] = ""
    with open(work / "output.txt", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            proc.wait(timeout=budget + GRACE_S)
        except subprocess.TimeoutExpired:
            stop(proc)
    points = []
    if log.exists():
        for line in log.read_text().splitlines():
            t, v = line.split()
            if float(t) <= budget:
                points.append((float(t), float(v)))
    if not points:
        tail = (work / "output.txt").read_text(errors="replace")[-2000:]
        print(f"  {name}: no evaluation within the budget; its output ends:\n{tail}")
    return sorted(points)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command's process group, SIGKILL after a few seconds."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def best_at(points: list[tuple[float, float]], t: float) -> float:
    """The best (lowest) value evaluated by time ``t``; inf before the first."""
    return min((v for s, v in points if s <= t), default=math.inf)


def summarise(runs: dict[str, list[list[tuple[float, float]]]], budget: float) -> dict[str, Any]:
    """Per system: median best at 25/50/100 % of the budget, and the time its median curve
    reaches the best peer's final median (None: never, within the budget)."""
    grid = [budget * k / 200 for k in range(1, 201)]
    medians = {n: [statistics.median(best_at(p, t) for p in rs) for t in grid]
               for n, rs in runs.items()}  # fmt: skip
    peer_finals = [m[-1] for n, m in medians.items() if not n.startswith("hf-")]
    target = min(peer_finals) if peer_finals else None
    rows: dict[str, Any] = {}
    for n, m in medians.items():
        reach = None
        if target is not None and math.isfinite(target):
            reach = next((t for t, v in zip(grid, m, strict=True) if v <= target), None)
        rows[n] = {f"best_{q}": m[q * 2 - 1] for q in (25, 50, 100)}
        rows[n]["reach_s"] = reach
        rows[n]["reach_fraction"] = None if reach is None else round(reach / budget, 3)
    return {"target": target, "grid": grid, "medians": medians, "rows": rows}


def plot(workload: str, runs: dict[str, list[list[tuple[float, float]]]], summary: dict[str, Any],
         path: Path) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    grid = summary["grid"]
    for n, rs in runs.items():
        curves = [[best_at(p, t) for t in grid] for p in rs]
        lo = [min(c[i] for c in curves) for i in range(len(grid))]
        hi = [max(c[i] for c in curves) for i in range(len(grid))]
        style = "-" if n.startswith("hf-") else "--"
        (line,) = ax.plot(grid, summary["medians"][n], style, label=n)
        ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.12)
    finite = [v for m in summary["medians"].values() for v in m if math.isfinite(v)]
    finals = [m[-1] for m in summary["medians"].values() if math.isfinite(m[-1])]
    if finite and min(finite) > 0:  # log scale, every system's final median in view
        ax.set_yscale("log")
        ax.set_ylim(min(finite) * 0.9, max(finals) * 2)
    ax.set_xlabel("wall seconds from the command's start")
    ax.set_ylabel("best val_loss so far (median over seeds; band: min-max)")
    ax.set_title(f"anytime: {workload}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(workload: str, budget: float, summary: dict[str, Any]) -> str:
    fmt = lambda v: "-" if v is None or not math.isfinite(v) else f"{v:.4f}"  # noqa: E731
    lines = [f"{workload}, budget {budget:g} s; target (best peer's final median): "
             f"{fmt(summary['target'])}", "",
             "| system | best @25 % | best @50 % | best @100 % | reaches target at |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for n, r in summary["rows"].items():
        reach = "-" if r["reach_s"] is None else f"{r['reach_s']:.1f} s ({r['reach_fraction']:.2f})"
        label = f"{n} (recommended)" if n == RECOMMENDED else n
        lines.append(f"| {label} | {fmt(r['best_25'])} | {fmt(r['best_50'])} | "
                     f"{fmt(r['best_100'])} | {reach} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", choices=list(SIZES), default="quick")
    ap.add_argument("--systems", help="comma-separated subset (default: the size's)")
    ap.add_argument("--budget", type=float, help="wall budget in s (default: the size's)")
    ap.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: the size's)")
    ap.add_argument("--workloads", help="comma-separated: digits, charlm (default: the size's)")
    ap.add_argument("--out", default=str(RESULTS), help="directory of the results")
    args = ap.parse_args()
    workloads, seeds, budgets, names = SIZES[args.size]
    names = args.systems.split(",") if args.systems else names or [*HYPERFLEET, *PEERS]
    seeds = list(range(args.seeds)) if args.seeds else seeds
    workloads = args.workloads.split(",") if args.workloads else workloads
    missing = [n for n in names if not available(n)]
    for n in missing:
        print(f"{n}: left out ({PEERS[n][2]} is not installed: pip install -e '.[bench]')")
    names = [n for n in names if n not in missing]
    out, t0 = Path(args.out), time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("ANYTIME_SCRATCH", "/tmp")) / f"hf-anytime-{os.getpid()}"
    scratch.mkdir(parents=True)
    report: dict[str, Any] = {"machine": machine(), "size": args.size, "workloads": {}}
    text = []
    for workload in workloads:
        budget = args.budget or budgets.get(workload) or SIZES["full"][2][workload]
        prepare_data(workload, scratch / "cache")  # the runs' cache: no system's clock pays it
        runs: dict[str, list[list[tuple[float, float]]]] = {n: [] for n in names}
        for seed in seeds:  # systems alternate within each seed
            for n in names:
                runs[n].append(run_system(n, workload, seed, budget, scratch))
                final = best_at(runs[n][-1], budget)
                print(f"  {workload} seed {seed} {n}: best {final:.4f}", flush=True)
        summary = summarise(runs, budget)
        plot(workload, runs, summary, out / f"anytime-{args.size}-{workload}.png")
        text.append(table(workload, budget, summary))
        report["workloads"][workload] = {"budget_s": budget, "seeds": seeds, "runs": runs,
                                         **{k: summary[k] for k in ("target", "rows")}}  # fmt: skip
    shutil.rmtree(scratch, ignore_errors=True)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    (out / f"anytime-{args.size}.json").write_text(json.dumps(report, indent=1))
    md = "\n\n".join(text) + f"\n\nwhole run: {report['wall_s']} s\n"
    (out / f"anytime-{args.size}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
