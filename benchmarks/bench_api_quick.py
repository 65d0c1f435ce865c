"""``hyperfleet.run`` against ``study.optimize`` on quick objectives, side by side in one run.

The notebook user's comparison: the same objective swept from Python by ``hyperfleet.run``
(in-process trials, 2 at a time, SQLite storage, MLflow kept) and by plain Optuna
(``optuna.create_study(storage="sqlite:///...").optimize(f, n_trials, n_jobs=2)``), both with
TPE. Two objectives: a 5 ms function of two floats, and a small scikit-learn model on digits
(``SGDClassifier``, its ``alpha`` and ``l1_ratio``). Each contender runs as a program of its own
(a fresh interpreter, the objective defined in its ``__main__`` as a script's or a notebook's
is, so hyperfleet ships it by value), in a new directory, contenders alternating within each
round; a warm-up run of each goes first (MLflow's template store, the OS's file cache).

Timed inside the program, from the call (``hyperfleet.run``; ``create_study`` then
``optimize``) to its return, after ``import hyperfleet`` / ``import optuna`` and the
objective's own imports: the first call in a fresh process, as a script makes it. *To first
trial*: from the call to the first objective's start (a wall-clock stamp the objective
writes). *Per trial*: (wall - to first trial) / trials. *Caller's CPU*: the CPU time of the
program's own process (for hyperfleet the controller's: its trials, and its MLflow writer for a
local store, run in processes of their own). Medians over the rounds; the ratio is
hyperfleet's wall over Optuna's.

    python benchmarks/bench_api_quick.py            # 30 and 90 trials, 3 rounds
    python benchmarks/bench_api_quick.py --quick    # 6 trials, 1 round: a smoke run
    python benchmarks/bench_api_quick.py --baseline ../main   # and hyperfleet from ../main
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

OBJECTIVES = ("5 ms function", "digits SGDClassifier")
CONTENDERS = ("hyperfleet.run", "study.optimize")
CONCURRENCY = 2

# what both contenders' programs share: the objective's body as a function of its params
EVALUATE = {
    "5 ms function": """
SPACE = {"x": (0.0, 1.0, False), "y": (0.0, 1.0, False)}

def evaluate(p):
    time.sleep(0.005)
    return (p["x"] - 0.3) ** 2 + (p["y"] - 0.7) ** 2
""",
    "digits SGDClassifier": """
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

SPACE = {"alpha": (1e-5, 1e-1, True), "l1_ratio": (0.0, 1.0, False)}
DATA = {}

def evaluate(p):
    if not DATA:
        X, y = load_digits(return_X_y=True)
        DATA["split"] = train_test_split(X / 16.0, y, test_size=0.3, random_state=0)
    X_train, X_test, y_train, y_test = DATA["split"]
    model = SGDClassifier(alpha=p["alpha"], l1_ratio=p["l1_ratio"], penalty="elasticnet",
                          max_iter=20, tol=None, random_state=0)
    model.fit(X_train, y_train)
    return 1.0 - model.score(X_test, y_test)
""",
}

COMMON = """
import json, os, sys, time
WORK = os.environ["BENCH_WORK"]  # the environment: a worker re-importing this file has it
STAMPS = os.path.join(WORK, "starts")

def stamp():
    with open(STAMPS, "a") as f:
        f.write(f"{time.time()}\\n")

def own_cpu():
    import resource
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime
"""

HYPERFLEET = """
import hyperfleet

def objective(ctx):
    stamp()
    ctx.report(1, {"loss": evaluate(ctx.params)})

if __name__ == "__main__":
    TRIALS = int(sys.argv[1])
    config = {
        "name": "quick", "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "tpe", "seed": 0},
        "budget": {"trials": TRIALS, "max_concurrent": CONCURRENCY},
        "space": {k: {"type": "float", "low": lo, "high": hi, "log": log}
                  for k, (lo, hi, log) in SPACE.items()},
        "trial": {"steps": 1, "eval_every": 1, "resources": {"devices": 0}},
        "workdir": WORK,
    }
    start = time.time()
    result = hyperfleet.run(config, objective, progress=False)
    wall = time.time() - start
    states = list(result.trials["state"])
    print(json.dumps({"start": start, "wall": wall, "complete": states.count("COMPLETE"),
                      "cpu": own_cpu()}))
"""

OPTUNA = """
import optuna

def objective(trial):
    stamp()
    return evaluate({k: trial.suggest_float(k, lo, hi, log=log)
                     for k, (lo, hi, log) in SPACE.items()})

if __name__ == "__main__":
    TRIALS = int(sys.argv[1])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.time()
    study = optuna.create_study(storage=f"sqlite:///{WORK}/optuna.db",
                                sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=TRIALS, n_jobs=CONCURRENCY)
    wall = time.time() - start
    states = [t.state.name for t in study.trials]
    print(json.dumps({"start": start, "wall": wall, "complete": states.count("COMPLETE"),
                      "cpu": own_cpu()}))
"""


BASELINE = "hyperfleet.run (baseline)"  # hyperfleet.run from the checkout given to --baseline


def program(contender: str, objective: str) -> str:
    """The whole program a run of ``contender`` on ``objective`` executes."""
    body = OPTUNA if contender == "study.optimize" else HYPERFLEET
    return (COMMON + EVALUATE[objective] + body).replace("CONCURRENCY", str(CONCURRENCY))


def run_once(
    contender: str, objective: str, trials: int, work: Path, code: Path = ROOT
) -> dict[str, float]:
    """One run in the new directory ``work`` with hyperfleet imported from ``code``: wall,
    time to the first trial and per trial."""
    work.mkdir(parents=True)
    script = work / "program.py"
    script.write_text(program(contender, objective))
    path = os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "BENCH_WORK": str(work)}
    proc = subprocess.run([sys.executable, str(script), str(trials)], cwd=work, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{contender} on {objective} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["complete"] != trials:
        raise SystemExit(f"{contender} on {objective}: {out['complete']}/{trials} COMPLETE")
    first = min(float(s) for s in (work / "starts").read_text().split()) - out["start"]
    per_trial = (out["wall"] - first) / trials
    return {"wall": out["wall"], "first": first, "per_trial": per_trial, "cpu": out["cpu"]}


def measure(
    sizes: list[int], rounds: int, base: Path, baseline: Path | None = None
) -> dict[str, Any]:
    """Every (objective, size, contender)'s runs, contenders alternating within each round;
    with ``baseline``, hyperfleet.run from that checkout too."""
    contenders = contenders_of(baseline)
    code = {c: baseline if c == BASELINE and baseline else ROOT for c in contenders}
    for objective in OBJECTIVES:  # warm-up: MLflow's template store, the file cache
        for c in contenders:
            run_once(c, objective, 2, base / "warm-up" / c / objective, code[c])
    runs: dict[str, list[dict[str, float]]] = {}
    n = 0
    for r in range(rounds):
        for objective in OBJECTIVES:
            for trials in sizes:
                order = contenders if (r + n) % 2 == 0 else contenders[::-1]
                n += 1
                for c in order:
                    run = run_once(c, objective, trials, base / f"r{r}-{n}-{c}", code[c])
                    runs.setdefault(f"{objective}|{trials}|{c}", []).append(run)
    return runs


def contenders_of(baseline: Path | None) -> tuple[str, ...]:
    return CONTENDERS if baseline is None else (*CONTENDERS, BASELINE)


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def table(
    runs: dict[str, Any], sizes: list[int], rounds: int, contenders: tuple[str, ...] = CONTENDERS
) -> list[str]:
    """The printed table: one row per objective, size and contender, the ratio on hyperfleet's."""
    lines = [
        f"hyperfleet.run vs study.optimize (SQLite, TPE, {CONCURRENCY} at a time), medians of "
        f"{rounds} interleaved round(s)",
        "",
        "| objective | trials | contender | wall s | to first trial s | per trial s "
        "| caller's CPU s | / study.optimize |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for objective in OBJECTIVES:
        for trials in sizes:
            med = {c: medians(runs[f"{objective}|{trials}|{c}"]) for c in contenders}
            base = med["study.optimize"]["wall"]
            for c in contenders:
                m = med[c]
                lines.append(
                    f"| {objective} | {trials} | {c} | {m['wall']:.2f} | {m['first']:.2f} "
                    f"| {m['per_trial'] * 1000:.1f} ms | {m['cpu']:.2f} | {m['wall'] / base:.2f} |"
                )
    return lines


def facts() -> str:
    import mlflow
    import optuna
    import sklearn

    load = os.getloadavg()[0]
    return (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs (load average {load:.2f} at "
        f"the start: the machine is shared), Python {platform.python_version()}, Optuna "
        f"{optuna.__version__}, MLflow {mlflow.__version__}, scikit-learn {sklearn.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 trials, 1 round: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (3)")
    parser.add_argument("--sizes", default=None, help="trial counts, comma-separated (30,90)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw runs here")
    parser.add_argument(
        "--baseline", type=Path, default=None,
        help="a checkout of hyperfleet (e.g. a git worktree of main) run as a third contender",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("6" if args.quick else "30,90")).split(",")]
    rounds = args.rounds or (1 if args.quick else 3)
    about = facts()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-api-quick-") as tmp:
        runs = measure(sizes, rounds, Path(tmp), args.baseline)
    print(f"`python benchmarks/bench_api_quick.py{' --quick' if args.quick else ''}` — {about}; "
          f"the whole run took {(time.perf_counter() - started) / 60:.1f} min.")  # fmt: skip
    print()
    print("\n".join(table(runs, sizes, rounds, contenders_of(args.baseline))))
    if args.baseline is not None:
        print(f"\nbaseline: hyperfleet from {args.baseline}")
    if args.json is not None:
        args.json.write_text(json.dumps({"facts": about, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
