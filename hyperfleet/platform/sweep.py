"""``hyperfleet sweep run``: one sweep on this host's devices, from the command line.

:class:`SweepRunner` builds the controller's parts for a sweep file — the device pool, the
launcher (torchrun trials, or in-process ones for ``resources.devices: 0``), the storage and
the MLflow tracker — opens the sweep and runs the :class:`~hyperfleet.platform.controller.
Controller` until the sweep is done, stopping it cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller import Controller, Progress, open_session
from hyperfleet.platform.launcher.base import Launcher
from hyperfleet.platform.pool import Device, LocalPool
from hyperfleet.platform.results import SweepSummary
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import SweepTracker

__all__ = ["Progress", "SweepRunner", "build_launcher", "build_pool", "default_urls"]


def default_urls(cfg: SweepConfig) -> tuple[str, str]:
    work = Path(cfg.workdir)
    storage = cfg.storage or f"sqlite:///{work / 'hyperfleet.db'}"
    tracking = cfg.tracking.uri or f"sqlite:///{work / 'mlflow.db'}"
    return storage, tracking


def build_pool(cfg: SweepConfig, devices: str = "auto") -> LocalPool:
    """The devices this sweep's trials lease; ``ConfigError``/``PoolError`` if they can't fit."""
    k = cfg.trial.resources.devices
    slots = cfg.budget.max_concurrent
    if k == 0:  # in-process trials: one slot per concurrent trial, no devices
        return LocalPool([Device("cpu", i) for i in range(slots)])
    pool = LocalPool.from_spec(devices, min_cpu_slots=k * slots)
    pool.check_fits(k)
    if cfg.is_population and pool.size // k < slots:
        raise ConfigError(
            f"budget.max_concurrent: {slots} PBT members of {k} device(s) need "
            f"{slots * k} devices, the pool has {pool.size}; lower it to "
            f"{pool.size // k} so members time-share the pool"
        )
    return pool


def build_launcher(cfg: SweepConfig, pool: LocalPool) -> Launcher:
    if cfg.trial.resources.devices == 0:
        from hyperfleet.platform.launcher.inprocess import InProcessLauncher

        return InProcessLauncher(cfg.budget.max_concurrent)
    from hyperfleet.platform.launcher.torchrun import TorchrunLauncher

    return TorchrunLauncher(pool.threads_per_process())


class SweepRunner:
    """One sweep on this host (see the module docstring)."""

    def __init__(
        self,
        cfg: SweepConfig,
        storage_url: str,
        tracking_uri: str,
        devices: str = "auto",
        on_progress: Callable[[Progress], None] | None = None,
        sweep_file: str | Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.sweep_file = sweep_file  # logged on the sweep's MLflow run
        self.storage_url = storage_url
        self.tracking_uri = tracking_uri
        self.pool = build_pool(cfg, devices)
        self.on_progress = on_progress
        self.controller: Controller | None = None
        self._stop = threading.Event()

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        if self.controller is not None:
            self.controller.request_stop()

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {
            sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def _controller(self) -> Controller:
        cfg = self.cfg
        experiment = cfg.tracking.experiment or cfg.name
        tracker = SweepTracker(  # first: an unreachable tracking store stops before storage
            self.tracking_uri, experiment, cfg.workdir, sweep_file=self.sweep_file,
            register_model=cfg.tracking.register_model,
        )  # fmt: skip
        storage = Storage(self.storage_url)
        session = open_session(cfg, storage, tracker, self.tracking_uri)
        launcher = build_launcher(cfg, self.pool)
        return Controller(session, self.pool, launcher, on_progress=self.on_progress)

    def run(self) -> SweepSummary:
        old_handlers = self._install_signals()
        try:
            self.controller = self._controller()
            if self._stop.is_set():
                self.controller.request_stop()
            return self.controller.run()
        finally:
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
