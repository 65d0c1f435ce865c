"""MLflow tracking of a sweep: one experiment, a run for the sweep, a nested run per trial.

:class:`SweepTracker` is the controller's side. Everything goes through an explicit
``MlflowClient`` and run ids, never the fluent API's active run. What the runs contain is
decided in :mod:`.records`; this module decides *when* it is written:

* **Opening** a sweep needs MLflow: the experiment (tagged so that MLflow 3 opens its
  model-training view) and the sweep's run (its params, the sweep file as an artifact) are
  written at once, and an unreachable store is a one-line error before anything runs.
  Continuing a sweep writes nothing until a trial actually runs again, so running a finished
  sweep once more changes nothing in MLflow.
* **Trial runs** are created when a trial first launches, off the controller's thread, under a
  placeholder id (:mod:`.trial_runs`): creating a run costs tens of milliseconds of MLflow
  calls, which would otherwise sit between one trial's end and the next one's start on every
  device. The controller records the real id in storage on its next tick
  (:meth:`SweepTracker.take_created`).
* **Reports** reach MLflow from the controller, not from the trial: the trial's sink appends
  them to its spool, and every ``ship_every_s`` seconds (6) the outbox sends what the running
  trials' spools hold that MLflow has not got (:meth:`SweepTracker.ship_running`). A trial
  process therefore never imports MLflow (about 1.5 s of CPU in each warm rank and in every
  cold trial's process, taken from the training beside it) and holds no connection to the
  tracking store: one controller's client serves all its trials.
* **Everything else** (a run's end state, final metrics and files, the best mark, the lineage)
  goes through the :class:`~.outbox.Outbox`: written off the controller's thread, in order, and
  retried until MLflow takes it. Each write is idempotent (it compares with what the run holds,
  or writes points with fixed timestamps), so writing again after a partial failure, or from
  ``hyperfleet mlflow sync``, adds nothing twice.
* **Closing** waits for the outbox (at most ``HYPERFLEET_MLFLOW_WAIT_S`` seconds, default 120,
  of continuous outage); then the best trial's model is logged (:mod:`.model`). Whatever could
  not be written stays in the trials' spools and storage for ``hyperfleet mlflow sync``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.credentials import keep
from hyperfleet.platform.tracking.artifacts import log_json, log_masked
from hyperfleet.platform.tracking.base import ChildRun, SweepView
from hyperfleet.platform.tracking.client import (
    check_env,
    checkpoint,
    experiment_location,
    is_transient,
    log_batches,
    open_client,
    sync_at_checkpoints,
    unreachable,
    use_wal,
)
from hyperfleet.platform.tracking.marks import LiveBest, render_parent
from hyperfleet.platform.tracking.outbox import Outbox
from hyperfleet.platform.tracking.records import (
    RUN_RUNNING,
    STATE_TAG,
    parent_params,
)
from hyperfleet.platform.tracking.runs import (
    check_run,
    end_trial_run,
    ensure_experiment,
)
from hyperfleet.platform.tracking.spool import Spool
from hyperfleet.platform.tracking.trial_runs import TrialRuns, now_ms
from hyperfleet.spec.states import TrialState
from hyperfleet.spec.wire import trial_dir

logger = logging.getLogger(__name__)


#: seconds between two shipments of the running trials' reports (:meth:`ship_running`)
SHIP_EVERY_S = 6.0


class SweepTracker:
    """The controller's side of MLflow (see the module docstring)."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        workdir: str | Path | None = None,
        *,
        sweep_file: str | Path | None = None,
        register_model: str | None = None,
        log_model: bool = True,
        live: bool = True,
        ship_every_s: float = SHIP_EVERY_S,
    ) -> None:
        """``live``: extend the sweep run's best-so-far curve as trials complete (off for
        ``hyperfleet mlflow sync``, which ends trials in storage's order, not as they came);
        ``ship_every_s``: see :meth:`ship_running`."""
        self.uri = uri = keep(uri)  # its password stays in the environment (credentials)
        self.live = live
        self.workdir = None if workdir is None else Path(workdir).resolve()
        self.sweep_file = None if sweep_file is None else Path(sweep_file)
        self.register_model = register_model
        self.log_model = log_model
        self.wait_s, max_backoff_s = check_env()  # before anything is created
        sync_at_checkpoints(uri)
        self.client = open_client(uri)
        try:
            location = experiment_location(uri, self.workdir)
            self.experiment_id: str | None = ensure_experiment(self.client, experiment, location)
            use_wal(uri)
        except ConfigError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise unreachable(uri, exc) from None
            raise
        self.outbox = Outbox(max_backoff_s)
        self.sweep = ""
        self.parent_id = ""
        self.config: SweepConfig | None = None  # the sweep's, once its parent run starts
        self.shipped = 0  # points sent from trial spools by this tracker
        self._parent_active = False
        self.runs = TrialRuns(self)  # which run each trial has
        self.best = LiveBest(self)
        self.ship_every_s = ship_every_s
        self._next_ship = time.monotonic() + self.ship_every_s
        self._shipping = False  # a shipment of the running trials is queued or under way

    @property
    def active(self) -> bool:
        """Whether this session wrote to the sweep (created it, or ran one of its trials)."""
        return self._parent_active

    # -- the sweep's run ---------------------------------------------------------------------

    def start_parent(self, sweep: str, run_id: str | None, config: SweepConfig) -> str:
        self.sweep, self.config = sweep, config
        if run_id:
            check_run(self.client, self.uri, sweep, run_id)
            self.parent_id = run_id
            self.best.seed(run_id)
            return run_id
        try:
            run = self.client.create_run(
                self.experiment_id,
                run_name=sweep,
                start_time=now_ms(),
                tags={
                    "hyperfleet.sweep": sweep,
                    "hyperfleet.kind": "sweep",
                    STATE_TAG: TrialState.RUNNING,
                },
            )
            self.parent_id = str(run.info.run_id)
            log_batches(self.client, self.parent_id, params=parent_params(config))
        except Exception as exc:
            if is_transient(exc):
                raise unreachable(self.uri, exc) from None
            raise
        self._parent_active = True
        self.outbox.put("the sweep file", lambda: self._sweep_files(self.parent_id, config))
        return self.parent_id

    def _sweep_files(self, run_id: str, config: SweepConfig) -> None:
        if self.sweep_file is not None and self.sweep_file.is_file():
            log_masked(self.client, run_id, self.sweep_file, "sweep")
        log_json(self.client, run_id, config.model_dump(mode="json"), "sweep/resolved.json")

    def _activate_parent(self) -> None:
        """The first trial of a continued sweep that runs: its run is RUNNING again."""
        if self._parent_active:
            return
        self._parent_active = True
        parent = self.parent_id

        def resume() -> None:
            self.client.update_run(parent, RUN_RUNNING)
            self.client.set_tag(parent, STATE_TAG, TrialState.RUNNING)

        self.outbox.put("the sweep run resumes", resume)

    # -- trial runs ----------------------------------------------------------------------------

    def trial_dir(self, number: int) -> Path | None:
        return None if self.workdir is None else trial_dir(self.workdir, self.sweep, number)

    def spool(self, number: int) -> Spool | None:
        directory = self.trial_dir(number)
        return None if directory is None else Spool(directory / "mlflow")

    def child(self, run: ChildRun) -> str:
        """The run id of a trial about to launch (:meth:`.TrialRuns.child`)."""
        self._activate_parent()
        return self.runs.child(run)

    def take_created(self) -> list[tuple[int, str]]:
        """The runs created since the last call (trial number, run id), for storage."""
        return self.runs.take_created()

    def disown(self, number: int) -> None:
        """Trial ``number`` was not launched here after all (:meth:`.TrialRuns.disown`)."""
        self.runs.disown(number)

    def resolved(self) -> dict[int, str]:
        return dict(self.runs.real)

    def adopt(self, run: ChildRun) -> None:
        """Know trial ``run.number`` without starting it (``hyperfleet mlflow sync``)."""
        self.runs.adopt(run)

    # -- a trial's end -------------------------------------------------------------------------

    def end_child(
        self,
        run_id: str,
        state: str,
        final: Mapping[str, float] | None = None,
        error: str = "",
        ended_at: float | None = None,
    ) -> None:
        """The launch ended (at ``ended_at``, default now); written through the outbox."""
        number = self.runs.numbers.get(run_id)
        now = now_ms() if ended_at is None else int(ended_at * 1000)
        values = dict(final or {})
        if state == TrialState.COMPLETE:
            self.best.add(values, now)
        ticket = self.outbox.put(
            f"the end of trial {number}'s run ({state})",
            lambda: self._end(run_id, number, state, values, error, now),
        )
        if state == TrialState.WAITING and number is not None:
            self.runs.waits[number] = ticket  # cancelled if the trial resumes before it is written

    def _end(
        self,
        run_id: str,
        number: int | None,
        state: str,
        final: Mapping[str, float],
        error: str,
        now: int,
    ) -> None:
        run_id = self.runs.resolve(run_id, number)
        number = self.runs.numbers.get(run_id, number)
        spool = None if number is None else self.spool(number)
        directory = None if number is None else self.trial_dir(number)
        fresh = number is not None and number in self.runs.fresh
        if fresh:  # the first attempt only: a retry reads the run
            self.runs.fresh.discard(number)
        self.shipped += end_trial_run(
            self.client, run_id, state, final, error, now, directory, spool, fresh
        )

    def ship(self, number: int, run_id: str | None) -> None:
        """Send trial ``number``'s spool now (``hyperfleet mlflow sync`` of a running trial)."""
        self.outbox.put(f"trial {number}'s spool", lambda: self._ship_live(number, run_id))

    def ship_running(self, running: Mapping[int, str]) -> None:
        """Send the reports the running trials (number -> run id) spooled since the last time,
        at most every ``ship_every_s`` seconds, as one operation of the outbox. While MLflow
        is away that operation is retried and no other is queued behind it, so an outage
        queues one shipment, not one per interval."""
        now = time.monotonic()
        if self._shipping or now < self._next_ship or not running:
            return
        self._next_ship = now + self.ship_every_s
        self._shipping = True
        trials = dict(running)

        def send() -> None:
            try:
                for number, run_id in trials.items():
                    self._ship_live(number, run_id)
            except Exception as exc:
                if not is_transient(exc):  # dropped by the outbox: the next interval tries
                    self._shipping = False
                raise
            self._shipping = False

        self.outbox.put("the running trials' reports", send)

    def _ship_live(self, number: int, run_id: str | None) -> None:
        spool = self.spool(number)
        if spool is None or not spool.unsent_bytes():
            return
        try:
            real = self.runs.resolve(run_id, number)
        except LookupError:
            return  # a run this tracker does not know (it ends through ``end_child``)
        self.shipped += spool.ship(self.client, real)

    # -- the sweep's end -----------------------------------------------------------------------

    def run_id_of(self, number: int, stored: str | None) -> str | None:
        """A trial's real run id (None if it has none that can be found)."""
        try:
            return self.runs.resolve(stored, number)
        except LookupError:
            return None

    def end_parent(self, run_id: str, status: str, view: SweepView) -> bool:
        from hyperfleet.platform.tracking.model import export_best

        self.outbox.put("the sweep run's end", lambda: render_parent(self, run_id, status, view))
        synced = self.wait()
        if synced and not view.interrupted:
            export_best(self, view)
        self.outbox.close()  # the session ends: what is still queued waits for a sync
        checkpoint(self.uri)
        return synced

    def close(self) -> bool:
        """This session's queued writes done (see :meth:`wait`), without ending the sweep's
        run; the outbox stops."""
        synced = self.wait()
        self.outbox.close()
        checkpoint(self.uri)
        return synced

    def wait(self) -> bool:
        """Wait for the outbox; False after ``wait_s`` seconds of continuous outage."""
        while not self.outbox.drain(1.0):
            down = self.outbox.failing_since
            if down is not None and time.monotonic() - down > self.wait_s:
                logger.warning(
                    "MLflow unreachable for %.0f s (%s); %d writes not done",
                    self.wait_s,
                    self.outbox.last_error,
                    self.outbox.pending,
                )
                return False
        return True
