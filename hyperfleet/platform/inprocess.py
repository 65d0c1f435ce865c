"""In-process trials (``trial.resources.devices: 0``): cheap objectives without a launch each.

A trial of a quick objective (a test function, a small scikit-learn model) costs less than
starting a process group. Such trials run in a pool of long-lived worker processes, started
once per sweep with the interpreter warm: each trial is one task that runs the same trial
runtime as a torchrun trial (same ``TrialContext``, same reports, pruning, checkpoints and
MLflow run), as a single process with no process group. Its output goes to its own log file.

A task can't be interrupted alone, so ``stop`` on one handle waits for it; stopping the sweep
terminates the pool's processes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import traceback
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path


def _init_worker() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # in-process trials hold no device
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)


def _run(spec_path: str, log_path: str) -> int:
    """One trial inside a pool worker; its stdout and stderr go to ``log_path``."""
    from hyperfleet.platform.trial_main import run_trial

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            run_trial(Path(spec_path))
            return 0
        except BaseException:  # noqa: BLE001 - the trial failed; the pool must live on
            traceback.print_exc()
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class InProcessHandle:
    """The handle of an in-process trial, with the interface of a launched one."""

    def __init__(self, future: Future[int], log_path: Path) -> None:
        self.future = future
        self.log_path = log_path

    def poll(self) -> int | None:
        if not self.future.done():
            return None
        if self.future.exception() is not None:
            return 1  # the worker process died
        return int(self.future.result())

    def stop(self, grace: float = 10.0) -> int:
        try:
            return int(self.future.result(timeout=grace))
        except Exception:  # noqa: BLE001 - timed out or the worker died
            return 1

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class InProcessPool:
    """``workers`` long-lived processes that run in-process trials one at a time each."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker
        )

    def launch(self, spec_path: Path, log_path: Path) -> InProcessHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return InProcessHandle(self._executor.submit(_run, str(spec_path), str(log_path)), log_path)

    def shutdown(self, kill: bool = False) -> None:
        if kill:
            for proc in list(getattr(self._executor, "_processes", {}).values()):
                proc.terminate()
        self._executor.shutdown(wait=True, cancel_futures=True)
