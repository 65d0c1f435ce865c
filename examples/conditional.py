"""A workload whose optimizer is a conditional choice: SGD with its own knobs, or AdamW with its.

It fits ``w`` in R^2 to an ill-conditioned quadratic ``L(w) = 10 (w0 - 1)^2 + 0.1 (w1 + 2)^2``
from ``w = (0, 0)`` with the optimizer the trial chose, in plain Python (no torch), and reports
``loss`` with a checkpoint at every evaluation (so PBT can copy a member). The sweep file
(``examples/conditional.yaml``) puts each optimizer's hyperparameters under its choice, so a
trial gets only those of the optimizer it runs: ``momentum`` and ``schedule`` (and ``decay``,
under ``schedule: step``) for SGD, ``beta2`` for AdamW. The workload checks that: a param of
the other optimizer fails the trial.

Run it with ``hyperfleet sweep run examples/conditional.yaml`` from the repository root.
"""

from __future__ import annotations

import math
from typing import Any

#: the workload's parameters and their defaults (``trial.params`` / ``space`` may set them)
hyperfleet_params = {
    "lr": 0.05,
    "optimizer": "sgd",
    "momentum": 0.9,
    "schedule": "constant",
    "decay": 0.5,
    "beta2": 0.999,
}
_OWN = {"sgd": {"momentum", "schedule", "decay"}, "adamw": {"beta2"}}
_SCALE = (10.0, 0.1)
_TARGET = (1.0, -2.0)


def loss(w: list[float]) -> float:
    return sum(a * (x - t) ** 2 for a, x, t in zip(_SCALE, w, _TARGET, strict=True))


def _grad(w: list[float]) -> list[float]:
    return [2 * a * (x - t) for a, x, t in zip(_SCALE, w, _TARGET, strict=True)]


def _clip(x: float) -> float:
    return max(-1e6, min(1e6, x))


def _check(params: dict[str, Any]) -> str:
    chosen = str(params["optimizer"])
    foreign = sorted(n for o, names in _OWN.items() if o != chosen for n in names & set(params))
    if foreign:
        raise ValueError(f"optimizer {chosen} was given {foreign}, params of another branch")
    return chosen


State = dict[str, Any]


def _sgd(params: dict[str, Any], step: int, steps: int, s: State) -> State:
    """SGD with momentum; under ``schedule: step`` the rate is multiplied by ``decay`` at
    each quarter of the run."""
    lr, beta = float(params["lr"]), float(params["momentum"])
    decay = float(params["decay"]) if params["schedule"] == "step" else 1.0
    rate = lr * decay ** (step * 4 // max(steps, 1))
    m = [beta * mi + gi for mi, gi in zip(s["m"], _grad(s["w"]), strict=True)]
    w = [_clip(wi - rate * mi) for wi, mi in zip(s["w"], m, strict=True)]  # too high: diverges
    return {**s, "w": w, "m": m}


def _adamw(params: dict[str, Any], step: int, steps: int, s: State) -> State:
    """AdamW (beta1 0.9, weight decay 0.01) with the trial's ``beta2``."""
    lr, beta1, beta2 = float(params["lr"]), 0.9, float(params["beta2"])
    g = _grad(s["w"])
    m = [beta1 * mi + (1 - beta1) * gi for mi, gi in zip(s["m"], g, strict=True)]
    v = [beta2 * vi + (1 - beta2) * gi * gi for vi, gi in zip(s["v"], g, strict=True)]
    w = [
        wi - lr * (mi / (1 - beta1**step) / (math.sqrt(vi / (1 - beta2**step)) + 1e-8) + 0.01 * wi)
        for wi, mi, vi in zip(s["w"], m, v, strict=True)
    ]
    return {**s, "w": w, "m": m, "v": v}


def main(ctx: Any) -> None:
    params = dict(ctx.params)
    update = _sgd if _check(params) == "sgd" else _adamw
    state = ctx.load_checkpoint() or {"step": 0, "w": [0.0, 0.0], "m": [0.0, 0.0], "v": [0.0, 0.0]}
    while state["step"] < ctx.max_steps:
        step = state["step"] + 1
        state = {**update(params, step, ctx.max_steps, state), "step": step}
        if ctx.should_eval(step):
            ctx.report(step, {"loss": loss(state["w"])}, checkpoint=state)
