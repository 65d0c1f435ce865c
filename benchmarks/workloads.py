"""Workloads of the side-by-side benchmarks, written against hyperfleet's public contract."""

from __future__ import annotations

from typing import Any


def noop(ctx: Any) -> None:
    """No compute: ``ctx.max_steps`` reports of a constant, so a trial costs only overhead."""
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"score": float(step)})


def triangle(ctx: Any) -> None:
    """Ray Tune's PBT toy (``ray/tune/examples/pbt_example.py``, ``PBTBenchmarkExample``),
    step for step: accuracy rises fastest when ``lr`` matches an optimum that follows a
    triangle wave of the accuracy itself, so only a learning-rate *schedule* gets far. A
    member ends at ``done`` (accuracy > ``$BENCH_SCORE``, 200 by default), as Ray's
    ``stop={"done": True}`` ends it, and appends ``time accuracy`` to ``$BENCH_SCORE_FILE``
    then (the harness's time to score).
    """
    import os
    import random
    import time

    import numpy as np

    state = ctx.load_checkpoint()
    step, accuracy = (state["step"], state["accuracy"]) if state else (0, 0.0)
    lr = float(ctx.params["lr"])
    score = float(os.environ.get("BENCH_SCORE", "200"))
    while step < ctx.max_steps:
        step += 1
        accuracy = _triangle_step(accuracy, lr, random.random, np.random.normal)
        done = accuracy > score
        if done and os.environ.get("BENCH_SCORE_FILE"):
            with open(os.environ["BENCH_SCORE_FILE"], "a") as f:
                f.write(f"{time.time()} {accuracy}\n")
        ctx.report(
            step, {"mean_accuracy": accuracy}, checkpoint={"step": step, "accuracy": accuracy}
        )
        if done:
            return


def _triangle_step(accuracy: float, lr: float, uniform: Any, normal: Any) -> float:
    """One ``PBTBenchmarkExample.step`` of Ray 2.60, verbatim in effect."""
    midpoint, q_tolerance, noise_level = 100, 3, 2
    if accuracy < midpoint:
        optimal_lr = 0.01 * accuracy / midpoint
    else:
        optimal_lr = 0.01 - 0.01 * (accuracy - midpoint) / midpoint
    optimal_lr = min(0.01, max(0.001, optimal_lr))
    q_err = max(lr, optimal_lr) / min(lr, optimal_lr)
    if q_err < q_tolerance:
        accuracy += (1.0 / q_err) * uniform()
    elif lr > optimal_lr:
        accuracy -= (q_err - q_tolerance) * uniform()
    accuracy += noise_level * normal()
    return max(0.0, accuracy)


def sleeper(ctx: Any) -> None:
    """A short trial's device time without compute: ``seconds`` split over its reports."""
    import time

    pause = float(ctx.params.get("seconds", 1.0)) / ctx.max_steps
    for step in range(1, ctx.max_steps + 1):
        time.sleep(pause)
        ctx.report(step, {"score": float(step)})
