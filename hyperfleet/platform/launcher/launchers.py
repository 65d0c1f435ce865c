"""The launcher of each sweep a worker serves, and its first trials' processes started ahead.

:class:`Launchers` picks a sweep's launcher (warm groups, plain torchrun, in-process, a user's
program) and starts the processes its first trials will run in before the sweep is opened
(:meth:`Launchers.prestart`): an interpreter and torch in each, seconds of CPU that would
otherwise begin only after the controller opened the sweep's stores. Importing this module
imports no storage, scheduler or MLflow code, so ``hyperfleet sweep run`` starts them right
after reading the sweep file (:func:`prestarted`), before it imports those.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

from hyperfleet.errors import ConfigError, PoolError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.launcher.base import Launcher
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.urls import sqlite_file


def build_pool(cfg: SweepConfig, devices: str = "auto") -> LocalPool:
    """This host's devices for the sweep's trials; ``ConfigError``/``PoolError`` if a node of
    its trials could never run on them."""
    r = cfg.trial.resources
    slots = cfg.budget.max_concurrent
    if r.devices == 0:  # in-process trials: one CPU slot each
        return LocalPool.from_spec(devices, min_cpu_slots=slots)
    k = r.devices // r.nodes
    pool = LocalPool.from_spec(devices, min_cpu_slots=-(-k * slots // r.per_device))
    pool.check_fits(k)
    room = pool.size * r.per_device // k  # trials that fit at once (shares of devices)
    if cfg.is_population and room < slots and r.nodes == 1:
        raise ConfigError(
            f"budget.max_concurrent: {slots} PBT members of {k} device(s) need "
            f"{slots * k} devices, the pool has {pool.size}"
            f"{f' shared {r.per_device} ways' if r.per_device > 1 else ''}; lower it to "
            f"{room} so members time-share the pool"
        )
    return pool


class Launchers:
    """The launcher of each sweep: warm torchrun groups shared by every sweep of one-node
    trials (a fresh group per trial with ``trial.reuse: false``), plain torchrun for trials
    that span hosts, and an in-process pool per sweep of ``devices: 0`` trials."""

    def __init__(self, pool: LocalPool) -> None:
        self.pool = pool
        self._warm: Any = None
        self._torchrun: Launcher | None = None
        self._inprocess: dict[str, Any] = {}
        self._script: Launcher | None = None

    def __call__(self, cfg: SweepConfig) -> Launcher:
        r = cfg.trial.resources
        if cfg.trial.command is not None:  # a program of the user's, run by a runner each
            if self._script is None:
                from hyperfleet.platform.launcher.script.launcher import ScriptLauncher

                self._script = ScriptLauncher(self.pool.threads_per_process())
            return self._script
        if r.devices == 0:
            from hyperfleet.platform.launcher.inprocess import InProcessLauncher, needs_torch

            if cfg.name not in self._inprocess:
                most = min(cfg.budget.max_concurrent, self.pool.size)
                threads = self.pool.threads_per_process()
                self._inprocess[cfg.name] = InProcessLauncher(
                    most, threads=threads, torch=needs_torch(cfg)
                )
            return cast(Launcher, self._inprocess[cfg.name])
        if r.nodes > 1:
            if self._torchrun is None:
                from hyperfleet.platform.launcher.torchrun import TorchrunLauncher

                self._torchrun = TorchrunLauncher(self.pool.threads_per_process())
            return self._torchrun
        if self._warm is None:
            from hyperfleet.platform.launcher.warm import WarmTorchrunLauncher

            self._warm = WarmTorchrunLauncher(self.pool.threads_per_process())
        return cast(Launcher, self._warm)

    def close(self) -> None:
        """Stop every process started (when no controller took these launchers over)."""
        for launcher in [*self._inprocess.values(), self._warm, self._torchrun, self._script]:
            if launcher is not None:
                launcher.close()
        self._inprocess, self._warm, self._torchrun, self._script = {}, None, None, None

    def prestart(self, cfg: SweepConfig) -> None:
        """Start the processes the sweep's first trials will run in now, so their start-up
        (an interpreter, torch) overlaps opening the sweep."""
        r = cfg.trial.resources
        if cfg.trial.command is not None:  # a program starts with its trial
            return
        if r.devices == 0:
            from hyperfleet.platform.launcher.inprocess import InProcessLauncher, needs_torch

            most = min(cfg.budget.max_concurrent, self.pool.size)
            threads = self.pool.threads_per_process()
            self._inprocess[cfg.name] = InProcessLauncher(
                most, prestart=True, threads=threads, torch=needs_torch(cfg)
            )
            return
        launcher = self(cfg)
        if r.nodes == 1:  # the first trials' leases, one node each
            first = self.pool.first_leases(r.devices, r.per_device, cfg.budget.max_concurrent)
            launcher.prestart(first, cfg.trial)

    def abandon(self) -> None:
        """Stop every process started, at once (the command ends before any trial ran)."""
        if self._warm is not None:
            self._warm.close_grace = 0.0
        with contextlib.suppress(Exception):
            self.close()


def prestarted(cfg: SweepConfig, devices: str, storage_url: str) -> Launchers | None:
    """Launchers with the sweep's first warm groups already starting, for a sweep of warm
    trials that is new to its storage (its SQLite file does not exist yet) or kept on a
    server (as :class:`~hyperfleet.platform.sweeps.run.SweepRunner` would start them; a
    stored sweep may have run its budget, which only opening the storage tells, so it waits
    for that). None when not, or when the devices do not fit (the runner reports that later,
    in its order). Not in-process trials: their fork server, started from a thread, cannot
    be stopped before it has imported torch, which a refused sweep would wait for."""
    r = cfg.trial.resources
    if r.devices == 0 or r.nodes > 1 or cfg.trial.command is not None or not cfg.trial.reuse:
        return None
    if storage_url.startswith("sqlite:"):
        path = sqlite_file(storage_url)
        if path is None or path.exists():
            return None
    try:
        launchers = Launchers(build_pool(cfg, devices))
    except (ConfigError, PoolError):
        return None
    launchers.prestart(cfg)
    return launchers
