"""Benchmark 3: Ray Tune's PBT example problem under Ray's PBT and under hyperfleet's.

The problem is Ray's ``PBTBenchmarkExample`` (``ray/tune/examples/pbt_example.py``): a
member's accuracy rises fastest when its ``lr`` follows a triangle wave of the accuracy
itself, so only a population that exploits and explores finds the schedule. Both sides run it
as Ray ships it: population 8 starting at ``lr = 1e-4``, perturbation interval 5 iterations,
mutations ``lr`` resampled from U(1e-4, 0.02) or scaled by 0.8 / 1.2 and ``some_other_factor``
in {1, 2}, the bottom quarter exploiting the top quarter, 2 CPUs (so 2 members train at once
and the others wait: Ray pauses and resumes them in reused actors, hyperfleet in warm groups),
a member stopping at accuracy > 200 or 1000 iterations. Time to score = from the command's
start to the first member past the score (each member appends the time to a shared file).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.side_by_side import PEERS, hyperfleet_sweep, median, peer_python, rounds, timed
from benchmarks.suite import Run, Size


def pbt_sweep(population: int) -> dict[str, Any]:
    return {
        "objective": {"metric": "mean_accuracy", "mode": "max"},
        "scheduler": {
            "type": "pbt", "population": population, "perturbation_interval": 5,
            "quantile_fraction": 0.25, "resample_probability": 0.25,
            "perturbation_factors": [0.8, 1.2],
            "initial": [{"lr": 0.0001, "some_other_factor": 1}] * population,
        },
        "budget": {"max_concurrent": 2},
        "space": {
            "lr": {"type": "float", "low": 0.0001, "high": 0.02},
            "some_other_factor": {"type": "categorical", "choices": [1, 2]},
        },
        "trial": {
            "workload": "benchmarks.workloads:triangle", "steps": 1000, "eval_every": 1,
            "resources": {"devices": 1}, "checkpoint": {"keep": 2},
        },
    }  # fmt: skip


def _time_to_score(score_file: Path, start: float) -> tuple[float | None, float | None]:
    """Seconds from ``start`` to the first member past the score, and its accuracy."""
    if not score_file.exists():
        return None, None
    hits = sorted(tuple(map(float, line.split())) for line in score_file.read_text().split("\n")
                  if line.strip())  # fmt: skip
    return (hits[0][0] - start, hits[0][1]) if hits else (None, None)


def _best(run: Run) -> float | None:
    """The best accuracy of a run: Ray's script prints it, hyperfleet's summary holds it."""
    best = run.out.get("best")
    if isinstance(best, dict):
        best = best.get("value")
    return None if best is None else float(best)


def pbt(scratch: Path, size: Size) -> dict[str, Any]:
    """Benchmark 3 (see the module docstring)."""
    threshold = {"BENCH_SCORE": str(size.pbt_score)}

    def hyperfleet(r: int) -> Run:
        score = scratch / f"hf-score-{r}.txt"
        start = time.time()
        sweep = pbt_sweep(size.pbt_population)
        env = {"BENCH_SCORE_FILE": str(score), **threshold}
        run = hyperfleet_sweep(scratch, "pbt-triangle", sweep, "cpu:2", env=env)
        run.out["to_score"], run.out["score"] = _time_to_score(score, start)
        return run

    def ray(r: int) -> Run:
        score = scratch / f"ray-score-{r}.txt"
        start = time.time()
        run = timed([peer_python("ray"), str(PEERS / "ray_pbt.py"), str(score),
                     str(size.pbt_population), str(size.pbt_score)], cwd=scratch)  # fmt: skip
        run.out["to_score"], run.out["score"] = _time_to_score(score, start)
        return run

    contenders = {"hyperfleet PBT (warm groups)": hyperfleet}
    if size.peers:
        contenders["Ray Tune PBT (reuse_actors)"] = ray
    runs = rounds(contenders, size.pbt_rounds)
    rows, raw = [], {}
    for name, got in runs.items():
        times = [r.out["to_score"] for r in got]
        reached = [t for t in times if t is not None]
        best = [_best(r) for r in got]
        raw[name] = {"to_score": times, "wall": [r.wall for r in got], "best": best}
        shown = (
            f"{median(reached):.1f}"
            if len(reached) == len(times)
            else f"{len(reached)}/{len(times)} reached"
        )
        rows.append(f"| {name} | {shown} | {median([r.wall for r in got]):.1f} | "
                    f"{', '.join(f'{b:.1f}' if b else '-' for b in best)} |")  # fmt: skip
    table = "\n".join([
        f"Ray's PBT toy, population {size.pbt_population}, stop at accuracy > "
        f"{size.pbt_score:g}, 2 CPUs, {size.pbt_rounds} interleaved round(s), medians:",
        "",
        "| contender | time to score s | wall s (every member stopped) | best accuracy per round |",
        "| --- | --- | --- | --- |",
        *rows,
    ])  # fmt: skip
    return {"population": size.pbt_population, "score": size.pbt_score, "runs": raw,
            "table": table}  # fmt: skip
