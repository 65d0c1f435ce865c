"""How busy a sweep's devices were while leased, from the system metrics MLflow recorded.

A lease says a device was *held*; whether it worked is in the trial's MLflow run, where the
trial sampled MLflow's system metrics (``hyperfleet.platform.tracking.system``): a GPU's
``gpu_<i>_utilization_percentage`` (``i`` is the device's place in the lease, as the trial's
processes number them) and, for a CPU device, the host's ``cpu_utilization_percentage``. The
load of a sweep is the mean of the samples taken during each lease, weighted by the lease's
length; a sweep whose trials recorded none has no load, and the page says "leased time" only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hyperfleet.dashboards.curves import Curve
from hyperfleet.platform.storage import LeaseRecord

CPU_KEY = "cpu_utilization_percentage"
SLACK_S = 2.0
"""A sample this close to a lease's ends counts for it (the last one is taken as it ends)."""


def device_key(device: str, place: int) -> str:
    """The system metric of ``device``, the ``place``-th of its lease."""
    return f"gpu_{place}_utilization_percentage" if device.startswith("cuda") else CPU_KEY


def lease_load(lease: LeaseRecord, metrics: Mapping[str, Curve], now: float) -> float | None:
    """The mean load (0-1) of the lease's devices over the samples taken while it was held."""
    end = (lease.ended_at or now) + SLACK_S
    samples = [
        v / 100.0
        for place, device in enumerate(lease.devices)
        if (curve := metrics.get(device_key(device, place))) is not None
        for t, v in zip(curve.times, curve.values, strict=True)
        if lease.started_at - SLACK_S <= t <= end
    ]
    return sum(samples) / len(samples) if samples else None


def sweep_load(
    leases: Sequence[LeaseRecord],
    runs: Mapping[int, str],
    system: Callable[[str], Mapping[str, Curve]],
    now: float,
) -> float | None:
    """The leases' loads (:func:`lease_load`), weighted by each lease's length; None when no
    lease has a sample. ``runs`` maps a trial to its MLflow run, ``system`` reads a run's
    system metrics."""
    total = weight = 0.0
    for lease in leases:
        run = runs.get(lease.trial)
        load = None if not run else lease_load(lease, system(run), now)
        if load is not None:
            held = max(1e-3, (lease.ended_at or now) - lease.started_at)
            total, weight = total + load * held, weight + held
    return total / weight if weight else None
