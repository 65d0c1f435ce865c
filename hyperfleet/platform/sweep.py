"""The sweep loop: ask the scheduler, lease devices, launch trials, reap them, repeat.

One ``SweepRunner.run`` creates the sweep (or continues it when its name is already in
storage) and runs it to its budget: at most ``budget.trials`` trials (counting every finished
and running one), at most ``max_concurrent`` at once and while devices are free, and no new
trial after ``budget.timeout`` (running trials finish). Every state that must survive a crash
is written to storage before the loop moves on. SIGINT or SIGTERM stops the trials (SIGTERM,
then SIGKILL after a grace period) and puts them back in the queue as WAITING with their
params, checkpoint and MLflow run, so running the same command again continues each one
instead of redoing it; COMPLETE trials are never rerun.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.launch import TrialHandle, TrialSpec, launch
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.results import SweepSummary, summarize
from hyperfleet.platform.schedulers import Scheduler, TrialState, build_scheduler
from hyperfleet.platform.storage import Storage, TrialRecord, worker_identity
from hyperfleet.platform.tracking import SweepTracker, flatten_params
from hyperfleet.trials.workloads.registry import merged_params

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 5.0
STOP_GRACE_S = 10.0


@dataclass
class Running:
    number: int
    handle: TrialHandle
    lease: Lease
    run_id: str


@dataclass(frozen=True)
class Progress:
    running: int
    finished: int
    budget: int | None
    best: float | None


def default_urls(cfg: SweepConfig) -> tuple[str, str]:
    work = Path(cfg.workdir)
    storage = cfg.storage or f"sqlite:///{work / 'hyperfleet.db'}"
    tracking = cfg.tracking.uri or f"sqlite:///{work / 'mlflow.db'}"
    return storage, tracking


class SweepRunner:
    def __init__(
        self,
        cfg: SweepConfig,
        storage_url: str,
        tracking_uri: str,
        devices: str = "auto",
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.storage_url = storage_url
        self.tracking_uri = tracking_uri
        k = cfg.trial.resources.devices
        self.pool = LocalPool.from_spec(devices, min_cpu_slots=k * cfg.budget.max_concurrent)
        self.pool.check_fits(k)
        self.on_progress = on_progress
        self.running: dict[int, Running] = {}
        self._stop = threading.Event()
        self._finished = 0

    # -- set-up ------------------------------------------------------------------------

    def _open(self) -> None:
        self.storage = Storage(self.storage_url)
        name = self.cfg.name
        row = self.storage.get_sweep(name)
        config = self.cfg.model_dump(mode="json")
        if row is None:
            row = self.storage.create_sweep(name, config)
        elif row.config.get("space") != config["space"]:
            raise ConfigError(
                f"space: differs from the stored sweep {name!r}; "
                f"a continued sweep keeps its space, so use a new name"
            )
        self.scheduler: Scheduler = build_scheduler(self.cfg, self.storage, create=True)
        work = Path(self.cfg.workdir)
        experiment = self.cfg.tracking.experiment or name
        self.tracker = SweepTracker(self.tracking_uri, experiment, work / "mlartifacts")
        parent = self.tracker.start_parent(name, row.mlflow_parent_run_id, config)
        self.parent_run_id = parent
        self.storage.update_sweep(
            name,
            status="running",
            mlflow_experiment_id=self.tracker.experiment_id,
            mlflow_parent_run_id=parent,
        )
        self._recover_stale()

    def _recover_stale(self) -> None:
        """Trials left RUNNING by a controller that died go back in the queue."""
        for t in self.storage.stale_running(self.cfg.name):
            logger.warning("trial %d was left RUNNING by a dead worker; requeued", t.number)
            self.scheduler.on_trial_end(t.number, TrialState.WAITING)
            self.storage.upsert_trial(self.cfg.name, t.number, state="WAITING")

    # -- launching ------------------------------------------------------------------------

    def _trial_dir(self, number: int) -> Path:
        return (Path(self.cfg.workdir) / self.cfg.name / f"trial-{number:04d}").resolve()

    def _logged_params(self, params: dict[str, Any]) -> dict[str, Any]:
        trial = self.cfg.trial.model_dump(mode="json", exclude={"params"})
        return {**params, **flatten_params({"trial": trial})}

    def _launch_next(self) -> bool:
        k = self.cfg.trial.resources.devices
        lease = self.pool.try_acquire(k)
        if lease is None:
            return False
        suggestion = self.scheduler.suggest()
        if suggestion is None:
            self.pool.release(lease)
            return False
        number = suggestion.trial_number
        prior = self.storage.get_trial(self.cfg.name, number)
        params = merged_params(self.cfg.trial.workload, self.cfg.trial.params, suggestion.params)
        if prior is not None and prior.mlflow_run_id:
            run_id = prior.mlflow_run_id
            self.tracker.resume_child(run_id)
        else:
            run_id = self.tracker.start_child(
                self.cfg.name, self.parent_run_id, number, self._logged_params(params)
            )
        handle = self._start(number, params, lease, run_id, prior)
        self.running[number] = Running(number, handle, lease, run_id)
        return True

    def _start(
        self,
        number: int,
        params: dict[str, Any],
        lease: Lease,
        run_id: str,
        prior: TrialRecord | None,
    ) -> TrialHandle:
        trial_dir = self._trial_dir(number)
        trial_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "sweep": self.cfg.name,
            "number": number,
            "config": self.cfg.model_dump(mode="json"),
            "params": params,
            "storage": self.storage_url,
            "tracking_uri": self.tracking_uri,
            "run_id": run_id,
            "trial_dir": str(trial_dir),
            "reported_through": prior.last_step if prior else None,
        }
        spec_path = trial_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        host, pid = worker_identity()
        self.storage.upsert_trial(
            self.cfg.name,
            number,
            state="RUNNING",
            params=params,
            host=host,
            pid=pid,
            heartbeat_at=time.time(),
            started_at=time.time(),
            ended_at=None,
            attempts=(prior.attempts if prior else 0) + 1,
            outcome=None,
            error=None,
            mlflow_run_id=run_id,
            log_path=str(trial_dir / "log.txt"),
            trial_dir=str(trial_dir),
        )
        logger.info("trial %d starts on %s", number, ", ".join(map(str, lease.devices)))
        name = f"{self.cfg.name}-{number}-{int(time.time() * 1000)}"
        ts = TrialSpec(name, spec_path, trial_dir / "log.txt", env={})
        return launch(ts, lease, self.pool.threads_per_process())

    # -- reaping ---------------------------------------------------------------------------

    def _outcome(self, number: int, code: int, r: Running) -> tuple[TrialState, list[float] | None, str]:
        rec = self.storage.get_trial(self.cfg.name, number)
        assert rec is not None
        if code != 0 or rec.outcome not in ("complete", "pruned"):
            tail = r.handle.log_tail()
            return TrialState.FAIL, None, f"exit code {code}\n{tail}"
        if rec.outcome == "pruned":
            return TrialState.PRUNED, None, ""
        missing = [o.metric for o in self.cfg.objectives if o.metric not in rec.metrics]
        if missing:
            reported = ", ".join(sorted(rec.metrics)) or "none"
            return (
                TrialState.FAIL,
                None,
                f"objective metric {', '.join(missing)} not in the last report "
                f"(reported: {reported}); report it or fix objective.metric",
            )
        return TrialState.COMPLETE, [float(rec.metrics[o.metric]) for o in self.cfg.objectives], ""

    def _finish(self, r: Running, state: TrialState, values: list[float] | None, error: str) -> None:
        name = self.cfg.name
        self.scheduler.on_trial_end(r.number, state, values, error or None)
        self.storage.upsert_trial(
            name, r.number, state=state.value, ended_at=time.time(), error=error or None
        )
        final = dict(zip([o.metric for o in self.cfg.objectives], values or [], strict=False))
        try:
            self.tracker.end_child(r.run_id, state.value, final, error)
        except Exception:  # noqa: BLE001 - the outcome is in storage; MLflow is best effort
            logger.warning("could not end MLflow run of trial %d", r.number, exc_info=True)
        self.pool.release(r.lease)
        del self.running[r.number]
        if state.finished:
            self._finished += 1
        logger.info("trial %d ended %s %s", r.number, state.value, values or "")

    def _reap(self) -> None:
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is not None:
                self._finish(r, *self._outcome(r.number, code, r))

    def _stop_all(self) -> None:
        """Stop every running trial; those that didn't finish go back to WAITING."""
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is None:
                r.handle.stop(STOP_GRACE_S)
                self._finish(r, TrialState.WAITING, None, "")
            else:
                self._finish(r, *self._outcome(r.number, code, r))

    # -- the loop --------------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        self._stop.set()

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, self.request_stop)
        return old

    def _heartbeat(self) -> None:
        for number in list(self.running):
            self.storage.upsert_trial(self.cfg.name, number, heartbeat_at=time.time())

    def run(self) -> SweepSummary:
        old_handlers = self._install_signals()
        try:
            self._open()
            return self._loop()
        finally:
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)

    def _loop(self) -> SweepSummary:
        deadline = None
        if self.cfg.budget.timeout is not None:
            deadline = time.monotonic() + self.cfg.budget.timeout
        exhausted = False
        last_beat = time.monotonic()
        try:
            while not self._stop.is_set():
                self._reap()
                timed_out = deadline is not None and time.monotonic() > deadline
                while (
                    not exhausted
                    and not timed_out
                    and not self._stop.is_set()
                    and len(self.running) < self.cfg.budget.max_concurrent
                ):
                    if not self._launch_next():
                        exhausted = self.pool.free >= self.cfg.trial.resources.devices
                        break
                if not self.running and (exhausted or timed_out):
                    break
                if time.monotonic() - last_beat > HEARTBEAT_EVERY_S:
                    self._heartbeat()
                    last_beat = time.monotonic()
                self._report_progress()
                self._stop.wait(0.2)
        finally:
            self._stop_all()
        interrupted = self._stop.is_set()
        summary = summarize(self.storage, self.cfg.name, interrupted=interrupted)
        best = summary.best()
        status = "KILLED" if interrupted else "FINISHED"
        self.tracker.end_parent(
            self.parent_run_id,
            status,
            {"number": best.number, "value": best.values[0]} if best and best.values else None,
        )
        self.storage.update_sweep(self.cfg.name, status="interrupted" if interrupted else "done")
        self.storage.close()
        return summary

    def _report_progress(self) -> None:
        if self.on_progress is None:
            return
        self.on_progress(
            Progress(
                running=len(self.running),
                finished=self._finished,
                budget=self.cfg.budget.trials,
                best=None,
            )
        )
