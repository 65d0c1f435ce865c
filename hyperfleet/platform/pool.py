"""The local device pool: which devices a trial may use, leased whole or in shares, given back.

A device is a GPU (``cuda:i``) or, without GPUs, a CPU slot: one trial process's share of the
host's cores. A lease holds ``k`` devices for one trial; it is returned when the trial ends,
is pruned or stops. ``try_acquire`` never blocks, so the sweep loop can poll several trials.
Best fit: among free devices, the lowest indices are taken, which keeps GPUs of a trial
adjacent (usually the same NVLink/PCIe switch).

**Shares.** Small trials waste a large device: ``trial.resources.per_device: K`` lets up to K
one-device trials hold one device together. Such a lease holds one device and a *share* of
it, ``1/K``, with a share index (the lane it runs in: the lowest index no other holder of the
device uses). A device takes holders while their shares add up to at most one (exact
fractions), so trials of sweeps with different K mix on a device without overcommitting it;
a whole-device lease (K = 1) needs a device nobody holds. A share goes to the device that is
already the fullest among those it fits on, which keeps whole devices free for trials that
need them. On a GPU each holder's process caps its memory at its share
(``torch.cuda.set_per_process_memory_fraction``, on the trial side); on a CPU slot each gets
its share of the slot's threads.

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
from fractions import Fraction

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
    share: int = 0  # the holder's lane on its device (0 for a whole-device lease)
    per_device: int = 1  # the device is shared K ways: this lease holds 1/K of it

    @property
    def kind(self) -> str:
        return self.devices[0].kind

    @property
    def fraction(self) -> Fraction:
        """How much of each of its devices the lease holds."""
        return Fraction(1, self.per_device)

    def env(self, threads_per_process: int) -> dict[str, str]:
        """Environment for the trial's processes: visible GPUs, or none and a thread cap (a
        share of a CPU slot gets its share of the slot's threads)."""
        if self.kind == "cuda":
            visible = ",".join(str(d.index) for d in self.devices)
            return {"CUDA_VISIBLE_DEVICES": visible}
        n = str(max(1, threads_per_process // self.per_device))
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
    """Devices of this host, leased to trials whole or in shares. Thread-safe."""

    def __init__(self, devices: list[Device]) -> None:
        if not devices:
            raise PoolError("the device pool is empty")
        self.devices = sorted(devices)
        self._holders: dict[Device, dict[int, Lease]] = {d: {} for d in self.devices}
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
        """Devices nobody holds, not even a share."""
        with self._lock:
            return sum(not held for held in self._holders.values())

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

    def _load(self, device: Device) -> Fraction:
        return sum((lease.fraction for lease in self._holders[device].values()), Fraction(0))

    def _place(self, k: int, per_device: int) -> tuple[tuple[Device, ...], int] | None:
        """The devices (and share index) a lease of ``k`` devices, ``1/per_device`` of each,
        would get now; None when it does not fit (called under the lock)."""
        if per_device == 1:
            free = [d for d in self.devices if not self._holders[d]]
            return (tuple(free[:k]), 0) if len(free) >= k else None
        assert k == 1, "a shared lease holds one device"
        share = Fraction(1, per_device)
        fits = [d for d in self.devices if self._load(d) + share <= 1]
        if not fits:
            return None
        device = max(fits, key=lambda d: (self._load(d), -d.index))  # the fullest, then lowest
        taken = {lease.share for lease in self._holders[device].values()}
        return (device,), min(i for i in range(len(taken) + 1) if i not in taken)

    def try_acquire(self, k: int, per_device: int = 1) -> Lease | None:
        """A lease of ``k`` devices (``1/per_device`` of one device when ``per_device`` > 1),
        or None if it does not fit now."""
        self.check_fits(k)
        with self._lock:
            placed = self._place(k, per_device)
            if placed is None:
                return None
            chosen, share = placed
            self._next_id += 1
            lease = Lease(chosen, self._next_id, share, per_device)
            for d in chosen:
                self._holders[d][lease.lease_id] = lease
            return lease

    def try_acquire_these(self, devices: tuple[Device, ...]) -> Lease | None:
        """A whole-device lease of exactly ``devices`` (those a process group was started on
        ahead), or None if one of them is held."""
        with self._lock:
            if any(self._holders[d] for d in devices):
                return None
            self._next_id += 1
            lease = Lease(tuple(sorted(devices)), self._next_id)
            for d in lease.devices:
                self._holders[d][lease.lease_id] = lease
            return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            gone = [d for d in lease.devices if lease.lease_id not in self._holders[d]]
            assert not gone, f"lease {lease.lease_id} released twice ({gone})"
            for d in lease.devices:
                del self._holders[d][lease.lease_id]

    def first_leases(self, k: int, per_device: int, n: int) -> list[Lease]:
        """The leases the first ``n`` trials of ``k`` devices would get from this pool as it
        is now (fewer when fewer fit), without holding any: what a launcher starts ahead."""
        scratch = LocalPool(self.devices)
        with self._lock:
            scratch._next_id = self._next_id
            for device, held in self._holders.items():
                scratch._holders[device] = dict(held)
        leases = []
        for _ in range(n):
            lease = scratch.try_acquire(k, per_device)
            if lease is None:
                break
            leases.append(lease)
        return leases

    @contextmanager
    def lease(self, k: int, per_device: int = 1) -> Iterator[Lease]:
        got = self.try_acquire(k, per_device)
        if got is None:
            raise PoolError(f"{k} devices are not free now ({self.free} of {self.size} are)")
        try:
            yield got
        finally:
            self.release(got)
