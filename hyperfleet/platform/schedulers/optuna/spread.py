"""Trials in flight at distinct points: the last step of the ``gp`` and ``skopt`` suggestions.

Both samplers condition their model on the trials in flight (the kriging believer, a constant
liar or qLogEI's fantasies) so that the next suggestion moves off them. That removes the
uncertainty at a pending point but keeps the model's mean there, so where the mean is the best
the model knows (a corner of the box that a bowl slopes down to, a basin's floor under an
exploiting acquisition such as the final batch's lower bound) the acquisition's best point can
still be a pending point itself, or next to it: measured on the real path before this step, up
to 6 of a final batch of 8 trials on one point, and a few trials of every run within 1e-3 of a
trial in flight. A second evaluation of the same configuration while the first still runs
tells the search nothing it will not learn from the first.

So when the acquisition's choice lies within ``SEPARATION`` of a pending point (the largest
coordinate difference in the unit box, a categorical coordinate counting 1 when its choice
differs), the sampler takes instead the best of a set of candidates that lie at least that far
from every pending point: quasi-random points of the whole box, and points scattered around
the first choice, most of them close to it (the acquisition's next best point is usually just
outside the excluded ball). The candidates are scored by the same acquisition. When no
candidate qualifies (a discrete space with fewer points than trials in flight), the first
choice stands.
"""

from __future__ import annotations

import numpy as np

#: the smallest distance kept between a suggestion and a trial in flight (unit box, max-norm)
SEPARATION = 0.01
#: candidates scattered around the first choice, at two scales (multiples of SEPARATION)
_AROUND = ((256, 2.0), (256, 10.0))


def nearest(points: np.ndarray, others: np.ndarray, categorical: np.ndarray | None) -> np.ndarray:
    """For each row of ``points``, its distance to the nearest row of ``others`` (both in the
    unit box; ``categorical``: a mask of the columns holding a choice's index, which count 1
    when they differ)."""
    diff = np.abs(points[:, None, :] - others[None, :, :])
    if categorical is not None and categorical.any():
        diff[..., categorical] = (diff[..., categorical] > 0.5).astype(float)
    return diff.max(axis=-1).min(axis=-1)


def around(x: np.ndarray, free: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Points scattered around ``x`` in its ``free`` columns (a mask: the continuous ones),
    clipped to the unit box; the other columns keep ``x``'s values."""
    batches = []
    for n, scale in _AROUND:
        batch = np.repeat(x[None, :], n, axis=0)
        step = rng.normal(0.0, scale * SEPARATION, size=(n, int(free.sum())))
        batch[:, free] = np.clip(batch[:, free] + step, 0.0, 1.0)
        batches.append(batch)
    return np.vstack(batches)


def crowded(x: np.ndarray, pending: np.ndarray | None, categorical: np.ndarray | None) -> bool:
    """Whether ``x`` lies closer than ``SEPARATION`` to a row of ``pending``."""
    if pending is None or len(pending) == 0:
        return False
    return bool(nearest(x[None, :], pending, categorical)[0] < SEPARATION)


def best_apart(
    points: np.ndarray, scores: np.ndarray, pending: np.ndarray, categorical: np.ndarray | None
) -> int | None:
    """The row of ``points`` with the best (highest) finite score among those at least
    ``SEPARATION`` from every row of ``pending``; None when there is none."""
    ok = (nearest(points, pending, categorical) >= SEPARATION) & np.isfinite(scores)
    if not ok.any():
        return None
    return int(np.flatnonzero(ok)[np.argmax(scores[ok])])
