"""When a model-based sampler's random start-up ends, with trials in flight.

A Bayesian sampler (``gp``, ``skopt``) suggests its first ``n_startup`` points at random and
fits its model after that. Counting only *finished* trials, as Optuna's samplers do, makes the
random phase grow with the number of workers: with ``c`` trials in flight, the trials asked
while the first ``n_startup`` are still running are random too, ``c - 1`` more of them (at
concurrency 16 and 10 start-up trials, 25 of a 40-trial budget). Here the start-up counts every
point already placed, finished or in flight, since a running trial's point is as good a
space-filling point as a finished one, and the model takes over once ``n_startup`` points are
placed and at least half of them have finished (a model needs some values to fit; the running
ones are its pending points).
"""

from __future__ import annotations


def model_ready(n_complete: int, n_running: int, n_startup: int) -> bool:
    """Whether the model, not the random start-up, makes the next suggestion.

    ``n_complete``: finished trials the model can fit; ``n_running``: other trials in flight
    (not the one being suggested); ``n_startup``: the sampler's start-up count.
    """
    if n_complete >= n_startup:
        return True
    return n_complete + n_running >= n_startup and n_complete >= (n_startup + 1) // 2
