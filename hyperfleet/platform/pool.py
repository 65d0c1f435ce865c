"""The local device pool: which devices a trial may use, leased whole and given back.

A device is a GPU (``cuda:i``) or, without GPUs, a CPU slot: one trial process's share of the
host's cores. A lease holds ``k`` devices for one trial; it is returned when the trial ends,
is pruned or stops. ``try_acquire`` never blocks, so the sweep loop can poll several trials.
Best fit: among free devices, the lowest indices are taken, which keeps GPUs of a trial
adjacent (usually the same NVLink/PCIe switch).

The device count is injectable (``LocalPool.from_spec("cpu:4")``), so the pool is testable
without GPUs; a later pool implementation shares devices of many hosts through PostgreSQL with
the same interface.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hyperfleet.errors import ConfigError, PoolError


@dataclass(frozen=True, order=True)
class Device:
    kind: str  # "cpu" | "cuda"
    index: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}"


@dataclass(frozen=True)
class Lease:
    devices: tuple[Device, ...]
    lease_id: int

    @property
    def kind(self) -> str:
        return self.devices[0].kind

    def env(self, threads_per_process: int) -> dict[str, str]:
        """Environment for the trial's processes: visible GPUs, or none and a thread cap."""
        if self.kind == "cuda":
            visible = ",".join(str(d.index) for d in self.devices)
            return {"CUDA_VISIBLE_DEVICES": visible}
        n = str(max(1, threads_per_process))
        return {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def count_gpus() -> int:
    """GPUs visible to this process, without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([line for line in out.stdout.splitlines() if line.startswith("GPU ")])


_SPEC = re.compile(r"^(cpu):(\d+)$|^(cuda):(\d+(?:,\d+)*)$|^(auto)$")


def parse_devices(spec: str, min_cpu_slots: int = 1) -> list[Device]:
    """``auto`` | ``cpu:N`` | ``cuda:0,1,...`` as devices.

    ``auto`` takes every visible GPU; without GPUs it gives CPU slots, at least the core count
    and at least ``min_cpu_slots`` (what the sweep's concurrency needs).
    """
    m = _SPEC.match(spec.strip())
    if not m:
        raise ConfigError(f"--devices: {spec!r} is not a device spec; use auto, cpu:N or cuda:0,1")
    if m.group(1):
        n = int(m.group(2))
        if n < 1:
            raise ConfigError(f"--devices: cpu:{n} has no slots; use cpu:N with N >= 1")
        return [Device("cpu", i) for i in range(n)]
    if m.group(3):
        idx = sorted({int(i) for i in m.group(4).split(",")})
        present = count_gpus()
        if idx[-1] >= present:
            have = f"GPUs 0-{present - 1}" if present else "no GPU"
            raise ConfigError(
                f"--devices: {spec!r} names GPUs this host doesn't have (it has {have}); "
                f"use auto, cpu:N or cuda: with indices below {present}"
            )
        return [Device("cuda", i) for i in idx]
    gpus = count_gpus()
    if gpus:
        return [Device("cuda", i) for i in range(gpus)]
    return [Device("cpu", i) for i in range(max(os.cpu_count() or 1, min_cpu_slots))]


class LocalPool:
    """Devices of this host, leased to trials. Thread-safe."""

    def __init__(self, devices: list[Device]) -> None:
        if not devices:
            raise PoolError("the device pool is empty")
        self.devices = sorted(devices)
        self._free = set(self.devices)
        self._lock = threading.Lock()
        self._next_id = 0

    @classmethod
    def slots(cls, n: int) -> LocalPool:
        """``n`` CPU slots: what in-process trials (which hold no device) lease."""
        return cls([Device("cpu", i) for i in range(n)])

    @classmethod
    def from_spec(cls, spec: str, min_cpu_slots: int = 1) -> LocalPool:
        return cls(parse_devices(spec, min_cpu_slots))

    @property
    def kind(self) -> str:
        return self.devices[0].kind

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def free(self) -> int:
        with self._lock:
            return len(self._free)

    def threads_per_process(self) -> int:
        """CPU threads for one trial process when every slot is busy."""
        return max(1, (os.cpu_count() or 1) // self.size)

    def check_fits(self, k: int) -> None:
        """``PoolError`` if a trial of ``k`` devices could never run on this pool."""
        if k > self.size:
            raise PoolError(
                f"trial.resources.devices: a trial needs {k} devices but the pool has "
                f"{self.size}; lower it or pass --devices with more"
            )

    def try_acquire(self, k: int) -> Lease | None:
        self.check_fits(k)
        with self._lock:
            if len(self._free) < k:
                return None
            chosen = tuple(sorted(self._free)[:k])
            self._free.difference_update(chosen)
            self._next_id += 1
            return Lease(chosen, self._next_id)

    def release(self, lease: Lease) -> None:
        with self._lock:
            overlap = self._free.intersection(lease.devices)
            assert not overlap, f"lease {lease.lease_id} released twice ({overlap})"
            self._free.update(lease.devices)

    @contextmanager
    def lease(self, k: int) -> Iterator[Lease]:
        got = self.try_acquire(k)
        if got is None:
            raise PoolError(f"{k} devices are not free now ({self.free} of {self.size} are)")
        try:
            yield got
        finally:
            self.release(got)
