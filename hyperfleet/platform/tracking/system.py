"""System metrics of a trial, logged through the trial's own sink.

MLflow's system-metrics logging samples CPU utilisation, memory, disk and network with
``psutil`` and, through NVML (``nvidia-ml-py``), each GPU's utilisation, memory and power; the
UI shows them on a run's *System metrics* tab (keys ``system/...``). hyperfleet does not use
MLflow's monitor thread, which writes to MLflow directly and gives up for good at the first
failed call: here every sample goes into the trial's sink with its reports, so it is batched,
spooled through an outage and sent once, like them. The GPUs are read with MLflow's NVML
collector. The host's figures are read with ``psutil`` here, under MLflow's own keys, in the
same way as MLflow's CPU, disk and network collectors: those live in the ``mlflow`` package,
whose import costs a trial process about 1.5 s of CPU (seconds of every short trial's life, on
every start of a trial process) while a trial needs no MLflow at all (its controller ships its
spool).

One sample every ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` seconds (MLflow's variable,
default 10), at steps 0, 1, 2, ... that continue across a resumed trial, plus one when the
trial ends, so even a short trial has one. GPUs are the trial's own: those its
``CUDA_VISIBLE_DEVICES`` names, numbered as the trial's processes see them (``gpu_0`` is
``cuda:0``). The run is tagged with the host (``hyperfleet.host``), the devices
(``hyperfleet.devices``: ``cuda:2,cuda:3`` in the host's numbering, or ``cpu``) and the GPUs'
model (``hyperfleet.gpus``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Protocol

from hyperfleet.platform.tracking.client import MLFLOW_IMPORT

logger = logging.getLogger(__name__)

DEFAULT_EVERY_S = 10.0


class _Sink(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...


def sampling_interval() -> float:
    """Seconds between samples: ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` or 10."""
    try:
        return float(os.environ.get("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S


def visible_gpus() -> list[int] | None:
    """Host indices of the GPUs this process may use (None: all of them, [] : none)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or parts == ["-1"]:
        return []
    if not all(p.isdigit() for p in parts):
        return None  # UUIDs: NVML's numbering cannot be matched, so report every GPU
    return [int(p) for p in parts]


class HostMonitor:
    """CPU, memory, disk and network of the host, with the keys and the arithmetic of MLflow's
    ``CPUMonitor``, ``DiskMonitor`` and ``NetworkMonitor`` (see the module docstring)."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        psutil.cpu_percent()  # the first reading only starts the measurement
        net = psutil.net_io_counters()
        self._net0 = (net.bytes_recv / 1e6, net.bytes_sent / 1e6)
        self.metrics: dict[str, list[float]] = {}
        self.net: dict[str, float] = {}  # since this monitor started, as MLflow's

    def collect_metrics(self) -> None:
        ps = self.psutil
        memory, disk, net = ps.virtual_memory(), ps.disk_usage(os.sep), ps.net_io_counters()
        sample = {
            "cpu_utilization_percentage": ps.cpu_percent(),
            "system_memory_usage_megabytes": memory.used / 1e6,
            "system_memory_usage_percentage": memory.used / memory.total * 100,
            "disk_usage_percentage": disk.percent,
            "disk_usage_megabytes": disk.used / 1e6,
            "disk_available_megabytes": disk.free / 1e6,
        }
        for key, value in sample.items():
            self.metrics.setdefault(key, []).append(value)
        self.net = {
            "network_receive_megabytes": net.bytes_recv / 1e6 - self._net0[0],
            "network_transmit_megabytes": net.bytes_sent / 1e6 - self._net0[1],
        }

    def aggregate_metrics(self) -> dict[str, float]:
        means = {k: round(sum(v) / len(v), 1) for k, v in self.metrics.items() if v}
        return {**means, **self.net}

    def clear_metrics(self) -> None:
        self.metrics.clear()


def _gpu_monitor(visible: list[int] | None) -> tuple[Any, list[str]]:
    """MLflow's NVML monitor over the visible GPUs, and their names; (None, []) without."""
    if visible == []:
        return None, []
    try:
        import pynvml

        pynvml.nvmlInit()  # raises without a driver: no GPU here, and no MLflow import
        if pynvml.nvmlDeviceGetCount() == 0:
            return None, []
        with MLFLOW_IMPORT:
            from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        monitor = GPUMonitor()
    except Exception:
        logger.debug("no NVML GPU metrics", exc_info=True)
        return None, []
    if visible is not None:
        handles = monitor.gpu_handles
        monitor.gpu_handles = [handles[i] for i in visible if i < len(handles)]
    names = []
    for handle in monitor.gpu_handles:
        name = pynvml.nvmlDeviceGetName(handle)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return (monitor if monitor.gpu_handles else None), names


def device_tags(visible: list[int] | None, gpu_names: list[str]) -> dict[str, str]:
    tags = {"hyperfleet.host": socket.gethostname()}
    if gpu_names:
        indices = visible if visible is not None else list(range(len(gpu_names)))
        tags["hyperfleet.devices"] = ",".join(f"cuda:{i}" for i in indices)
        tags["hyperfleet.gpus"] = ", ".join(sorted(set(gpu_names)))
    else:
        tags["hyperfleet.devices"] = "cpu"
    return tags


class SystemSampler:
    """Samples system metrics into ``sink`` from its own thread (see the module docstring)."""

    def __init__(self, sink: _Sink, first_step: int = 0, every_s: float | None = None) -> None:
        self.sink = sink
        self.every_s = sampling_interval() if every_s is None else every_s
        self.step = self.first_step = first_step
        self.monitors: list[Any] = []
        self._last = 0.0  # monotonic time of the last sample
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        try:
            self.monitors = [HostMonitor()]
        except Exception:
            logger.warning("no system metrics (install psutil)", exc_info=True)
        visible = visible_gpus()
        gpu, names = _gpu_monitor(visible)
        if gpu is not None:
            self.monitors.append(gpu)
        self.sink.set_tags(device_tags(visible, names))

    def sample(self) -> None:
        """Collect one sample and log it at the next step."""
        with self._lock:
            metrics: dict[str, float] = {}
            for monitor in self.monitors:
                try:
                    monitor.collect_metrics()
                    metrics.update(monitor.aggregate_metrics())
                except Exception:
                    logger.debug("system metrics collector failed", exc_info=True)
                finally:
                    monitor.clear_metrics()
            if metrics:
                self.sink.log_metrics(
                    self.step, {f"system/{k}": float(v) for k, v in metrics.items()}
                )
                self.step += 1

    def _run(self) -> None:
        try:
            self._open()
        finally:
            self._ready.set()
        while not self._stop.wait(self.every_s):
            self.sample()

    def close(self) -> None:
        """Stop sampling; one last sample (so that every run has one), unless one was just
        taken (a CPU reading over a few milliseconds says nothing)."""
        self._stop.set()
        self._ready.wait(timeout=180)
        self._thread.join(timeout=30)
        if self.step == self.first_step or time.monotonic() - self._last > 1.0:
            self.sample()
