"""The toy problem of the PBT paper (Jaderberg et al., 2017, Figure 2) as a custom workload.

Parameters theta in R^2 start at (0.9, 0.9); the true objective is
``Q(theta) = 1.2 - (theta0^2 + theta1^2)``, maximal (1.2) at the origin. A member cannot see Q:
it ascends the surrogate ``Q_hat(theta | h) = 1.2 - (h0 theta0^2 + h1 theta1^2)`` by gradient
steps, with hyperparameters ``h = (h0, h1)``, and reports Q. A member with ``h = (1, 0)`` only
ever shrinks theta0 and one with ``h = (0, 1)`` only theta1, so on their own neither gets past
``Q = 1.2 - 0.81 = 0.39``. With PBT, a member copies the other's theta (exploit) and perturbs h
(explore), and the population reaches the optimum.

Run it with ``hyperfleet sweep run examples/pbt_toy.yaml`` from the repository root. The
workload follows the public contract only: it reads ``ctx.params``, continues from
``ctx.load_checkpoint()`` and reports ``Q`` with a checkpoint of theta; an exploit restarts it
with the donor's checkpoint and the explored ``h`` (which win over anything in the checkpoint).
"""

from __future__ import annotations

from typing import Any

#: the workload's parameters and their defaults (``trial.params`` / ``space`` may set them)
hyperfleet_params = {"h0": 1.0, "h1": 0.0, "lr": 0.02}


def q(theta: list[float]) -> float:
    return 1.2 - (theta[0] ** 2 + theta[1] ** 2)


def main(ctx: Any) -> None:
    h0, h1 = float(ctx.params["h0"]), float(ctx.params["h1"])
    lr = float(ctx.params.get("lr", 0.02))
    state = ctx.load_checkpoint()
    theta = [0.9, 0.9] if state is None else [float(t) for t in state["theta"]]
    step = 0 if state is None else int(state["step"])
    while step < ctx.max_steps:
        # gradient ascent on Q_hat: d/dtheta_i of -(h_i theta_i^2) is -2 h_i theta_i
        theta = [theta[0] - lr * 2.0 * h0 * theta[0], theta[1] - lr * 2.0 * h1 * theta[1]]
        step += 1
        if ctx.should_eval(step):
            q_hat = 1.2 - (h0 * theta[0] ** 2 + h1 * theta[1] ** 2)
            metrics = {"Q": q(theta), "Q_hat": q_hat, "theta0": theta[0], "theta1": theta[1]}
            ctx.report(step, metrics, checkpoint={"theta": theta, "step": step})
