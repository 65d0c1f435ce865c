"""The sweep loop: ask the scheduler, lease devices, launch trials, reap them, repeat.

One ``SweepRunner.run`` creates the sweep (or continues it when its name is already in
storage) and runs it until the scheduler has nothing left: for Optuna-based schedulers at most
``budget.trials`` trials (counting every finished and running one); for PBT until every member
reached its step budget. At most ``max_concurrent`` trials run at once, and only while devices
are free; no new trial starts after ``budget.timeout`` (running trials finish). Every state that
must survive a crash is written to storage before the loop moves on.

SIGINT or SIGTERM stops the trials (SIGTERM, then SIGKILL after a grace period) and requeues
them with their params, checkpoint and MLflow run, so running the same command again continues
each one instead of redoing it; COMPLETE trials are never rerun. A trial that pauses (PBT
time-sharing) gives its devices back and is resumed later by the scheduler.
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
from hyperfleet.platform.config import (
    SweepConfig,
    apply_overrides,
    layout_problems,
    split_params,
)
from hyperfleet.platform.inprocess import InProcessPool
from hyperfleet.platform.launch import Handle, NoProcess, TrialSpec, launch
from hyperfleet.platform.lineage import log_sweep_lineage
from hyperfleet.platform.paths import replica_folder, trial_dir
from hyperfleet.platform.pool import Device, Lease, LocalPool
from hyperfleet.platform.results import SweepSummary, summarize
from hyperfleet.platform.schedulers import Scheduler, Suggestion, TrialState, build_scheduler
from hyperfleet.platform.storage import Storage, TrialRecord, worker_identity
from hyperfleet.platform.tracking import SweepTracker, flatten_params
from hyperfleet.trials.workloads.registry import merged_params

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 5.0
STOP_GRACE_S = 10.0


@dataclass
class Running:
    number: int
    handle: Handle
    lease: Lease
    run_id: str


@dataclass(frozen=True)
class Progress:
    running: int
    finished: int
    budget: int | None


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
        slots = cfg.budget.max_concurrent
        self.inprocess: InProcessPool | None = None
        if k == 0:  # in-process trials: one slot per concurrent trial, no devices
            self.pool = LocalPool([Device("cpu", i) for i in range(slots)])
        else:
            self.pool = LocalPool.from_spec(devices, min_cpu_slots=k * slots)
            self.pool.check_fits(k)
            if cfg.is_population and self.pool.size // k < slots:
                raise ConfigError(
                    f"budget.max_concurrent: {slots} PBT members of {k} device(s) need "
                    f"{slots * k} devices, the pool has {self.pool.size}; lower it to "
                    f"{self.pool.size // k} so members time-share the pool"
                )
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
        # as stored (not the in-memory value of a row just created): every reader, on any
        # host, derives the same replica folder from it
        stored = self.storage.get_sweep(name)
        assert stored is not None
        self.created_at = stored.created_at
        self.scheduler: Scheduler = build_scheduler(self.cfg, self.storage, create=True)
        experiment = self.cfg.tracking.experiment or name
        artifacts = Path(self.cfg.workdir) / "mlartifacts"
        self.tracker = SweepTracker(self.tracking_uri, experiment, artifacts)
        self.parent_run_id = self.tracker.start_parent(name, row.mlflow_parent_run_id, config)
        self.storage.update_sweep(
            name,
            status="running",
            mlflow_experiment_id=self.tracker.experiment_id,
            mlflow_parent_run_id=self.parent_run_id,
        )
        self._recover_stale()
        if self.cfg.trial.resources.devices == 0:
            self.inprocess = InProcessPool(self.cfg.budget.max_concurrent)

    def _recover_stale(self) -> None:
        """Trials left RUNNING by a controller that died go back in the queue."""
        for t in self.storage.stale_running(self.cfg.name):
            logger.warning("trial %d was left RUNNING by a dead worker; requeued", t.number)
            self.scheduler.requeue(t.number)
            self.storage.upsert_trial(self.cfg.name, t.number, state="WAITING")

    # -- launching ------------------------------------------------------------------------

    def _logged_params(self, cfg: SweepConfig, params: dict[str, Any]) -> dict[str, Any]:
        trial = cfg.trial.model_dump(mode="json", exclude={"params"})
        return {**params, **flatten_params({"trial": trial})}

    def _trial_config(self, knobs: dict[str, Any]) -> tuple[SweepConfig, list[str]]:
        """The sweep config with the sampled system knobs applied, and its layout problems."""
        if not knobs:
            return self.cfg, []
        try:
            trial = apply_overrides(self.cfg.trial, knobs)
        except ConfigError as exc:
            return self.cfg, exc.problems
        cfg = self.cfg.model_copy(update={"trial": trial})
        return cfg, layout_problems(cfg)

    def _launch_next(self) -> bool:
        """Start one trial if a slot, devices and a suggestion are there; False if not."""
        lease = self.pool.try_acquire(max(1, self.cfg.trial.resources.devices))
        if lease is None:
            return False
        suggestion = self.scheduler.suggest()
        if suggestion is None:
            self.pool.release(lease)
            return False
        number = suggestion.trial_number
        prior = self.storage.get_trial(self.cfg.name, number)
        sampled, knobs = split_params(suggestion.params)
        cfg, problems = self._trial_config(knobs)
        params = merged_params(cfg.trial.workload, cfg.trial.params, sampled)
        if prior is not None and prior.mlflow_run_id:
            run_id = prior.mlflow_run_id
            self.tracker.resume_child(run_id)
        else:
            run_id = self.tracker.start_child(
                self.cfg.name,
                self.parent_run_id,
                number,
                self._logged_params(cfg, params),
                tags=self.scheduler.suggestion_info(number),
            )
        if problems:  # a sampled combination that breaks a layout rule never launches
            self._reject(number, {**params, **knobs}, lease, run_id, "; ".join(problems))
            return True
        handle = self._start(cfg, suggestion, params, lease, run_id, prior, knobs)
        self.running[number] = Running(number, handle, lease, run_id)
        return True

    def _reject(
        self, number: int, params: dict[str, Any], lease: Lease, run_id: str, error: str
    ) -> None:
        logger.warning("trial %d rejected before launch: %s", number, error)
        now = time.time()
        self.storage.upsert_trial(
            self.cfg.name, number, state="RUNNING", params=params, started_at=now, attempts=0
        )
        rejected = self.running[number] = Running(number, NoProcess(), lease, run_id)
        self._finish(rejected, TrialState.FAIL, None, error)

    def _spec(
        self,
        cfg: SweepConfig,
        s: Suggestion,
        params: dict[str, Any],
        run_id: str,
        prior: TrialRecord | None,
    ) -> dict[str, Any]:
        point = s.restore_point()
        root = cfg.trial.checkpoint.replica
        replica = None if root is None else replica_folder(root, self.cfg.name, self.created_at)
        through = prior.last_step if prior else None
        if point is not None:  # continues from another checkpoint: later steps are new
            through = point[1]
        return {
            "sweep": self.cfg.name,
            "number": s.trial_number,
            "config": cfg.model_dump(mode="json"),
            "params": params,
            "storage": self.storage_url,
            "tracking_uri": self.tracking_uri,
            "run_id": run_id,
            "trial_dir": str(trial_dir(self.cfg.workdir, self.cfg.name, s.trial_number)),
            "reported_through": through,
            "replica": None if replica is None else str(replica),
            "restore": None if point is None else {"trial": point[0], "step": point[1]},
        }

    def _start(
        self,
        cfg: SweepConfig,
        s: Suggestion,
        params: dict[str, Any],
        lease: Lease,
        run_id: str,
        prior: TrialRecord | None,
        knobs: dict[str, Any],
    ) -> Handle:
        number = s.trial_number
        tdir = trial_dir(self.cfg.workdir, self.cfg.name, number)
        tdir.mkdir(parents=True, exist_ok=True)
        spec_path = tdir / "spec.json"
        spec_path.write_text(json.dumps(self._spec(cfg, s, params, run_id, prior), indent=2))
        self._adopt_donor_record(number, s.restore_point())
        host, pid = worker_identity()
        now = time.time()
        self.storage.upsert_trial(
            self.cfg.name,
            number,
            state="RUNNING",
            params={**params, **knobs},
            host=host,
            pid=pid,
            heartbeat_at=now,
            started_at=now,
            ended_at=None,
            attempts=(prior.attempts if prior else 0) + 1,
            outcome=None,
            error=None,
            mlflow_run_id=run_id,
            log_path=str(tdir / "log.txt"),
            trial_dir=str(tdir),
        )
        if self.inprocess is not None:
            logger.info("trial %d starts in-process", number)
            return self.inprocess.launch(spec_path, tdir / "log.txt")
        logger.info("trial %d starts on %s", number, ", ".join(map(str, lease.devices)))
        ts = TrialSpec(
            f"{self.cfg.name}-{number}-{int(now * 1000)}", spec_path, tdir / "log.txt", env={}
        )
        return launch(ts, lease, self.pool.threads_per_process())

    def _adopt_donor_record(self, number: int, point: tuple[int, int | None] | None) -> None:
        """A trial resuming from another trial's checkpoint (a PBT member whose weights are a
        donor's) starts at that step with what the donor reported there; if that is already
        its step budget, no later report will set it."""
        if point is None or point[0] == number or point[1] is None:
            return
        donor = self.storage.get_trial(self.cfg.name, point[0])
        if donor is not None and donor.last_step == point[1]:
            self.storage.upsert_trial(
                self.cfg.name, number, last_step=point[1], metrics=dict(donor.metrics)
            )

    # -- reaping ---------------------------------------------------------------------------

    def _outcome(self, r: Running, code: int) -> tuple[TrialState | None, list[float] | None, str]:
        """The trial's end state (None: paused), objective values and error text."""
        rec = self.storage.get_trial(self.cfg.name, r.number)
        assert rec is not None
        if code != 0 or rec.outcome not in ("complete", "pruned", "paused"):
            return TrialState.FAIL, None, f"exit code {code}\n{r.handle.log_tail()}"
        if rec.outcome == "pruned":
            return TrialState.PRUNED, None, ""
        if rec.outcome == "paused":
            return None, None, ""
        missing = [o.metric for o in self.cfg.all_objectives if o.metric not in rec.metrics]
        if missing:
            reported = ", ".join(sorted(rec.metrics)) or "none"
            return (
                TrialState.FAIL,
                None,
                f"objective metric {', '.join(missing)} not in the last report "
                f"(reported: {reported}); report it or fix objective.metric",
            )
        return (
            TrialState.COMPLETE,
            [float(rec.metrics[o.metric]) for o in self.cfg.all_objectives],
            "",
        )

    def _finish(
        self, r: Running, state: TrialState | None, values: list[float] | None, error: str
    ) -> None:
        """Record how the trial's processes ended and give its devices back."""
        name = self.cfg.name
        if state is None:  # paused: the scheduler resumes it later
            self.scheduler.on_trial_end(r.number, TrialState.COMPLETE)
            stored, tracked = "PAUSED", "WAITING"
        elif state is TrialState.WAITING:  # stopped by an interrupt
            self.scheduler.requeue(r.number)
            stored = tracked = "WAITING"
        else:
            self.scheduler.on_trial_end(r.number, state, values, error or None)
            stored = tracked = state.value
            self._finished += 1
        self.storage.upsert_trial(
            name, r.number, state=stored, ended_at=time.time(), error=error or None
        )
        final = dict(zip([o.metric for o in self.cfg.all_objectives], values or [], strict=False))
        try:
            self.tracker.end_child(r.run_id, tracked, final, error)
        except Exception:
            logger.warning("could not end MLflow run of trial %d", r.number, exc_info=True)
        self.pool.release(r.lease)
        del self.running[r.number]
        logger.info("trial %d ended %s %s", r.number, stored, values or "")

    def _reap(self) -> None:
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is not None:
                self._finish(r, *self._outcome(r, code))

    def _stop_all(self) -> None:
        """Stop every running trial; those that didn't finish go back in the queue."""
        if self.inprocess is not None:
            self.inprocess.shutdown(kill=True)
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is None:
                r.handle.stop(STOP_GRACE_S)
                self._finish(r, TrialState.WAITING, None, "")
            else:
                self._finish(r, *self._outcome(r, code))

    # -- the loop --------------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        self._stop.set()

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {
            sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }

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

    def _fill(self, timed_out: bool) -> bool:
        """Launch trials while there is room; False when the scheduler had nothing."""
        while not timed_out and not self._stop.is_set():
            if len(self.running) >= self.cfg.budget.max_concurrent:
                return True
            if self.pool.free < max(1, self.cfg.trial.resources.devices):
                return True
            if not self._launch_next():
                return False
        return True

    def _loop(self) -> SweepSummary:
        timeout = self.cfg.budget.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        last_beat = time.monotonic()
        try:
            while not self._stop.is_set():
                self._reap()
                timed_out = deadline is not None and time.monotonic() > deadline
                more = self._fill(timed_out)
                if not self.running and (not more or timed_out or self.scheduler.finished()):
                    break
                if time.monotonic() - last_beat > HEARTBEAT_EVERY_S:
                    self._heartbeat()
                    last_beat = time.monotonic()
                if self.on_progress is not None:
                    self.on_progress(Progress(len(self.running), self._finished, self._budget()))
                self._stop.wait(0.1)
        finally:
            self._stop_all()
        return self._close()

    def _budget(self) -> int | None:
        population = getattr(self.cfg.scheduler, "population", None)
        return population or self.cfg.budget.trials

    def _close(self) -> SweepSummary:
        interrupted = self._stop.is_set()
        summary = summarize(self.storage, self.cfg.name, interrupted=interrupted)
        best = summary.best()
        if self.cfg.is_population:
            log_sweep_lineage(self.tracker, self.parent_run_id, self.storage, self.cfg.name)
        self.tracker.end_parent(
            self.parent_run_id,
            "KILLED" if interrupted else "FINISHED",
            {"number": best.number, "value": best.values[0]} if best and best.values else None,
        )
        self.storage.update_sweep(self.cfg.name, status="interrupted" if interrupted else "done")
        self.storage.close()
        return summary
