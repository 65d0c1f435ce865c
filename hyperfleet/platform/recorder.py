"""Rank 0's recorder: each ``ctx.report`` of a trial recorded, logged and decided.

The trial runtime hands every report of rank 0 to this recorder, which writes it to storage
(the trial's row and, through the scheduler, Optuna's intermediate values or the PBT member),
queues its metrics for MLflow (batched, off the training thread, spooled through an outage:
:mod:`hyperfleet.platform.tracking.sink`) and returns the scheduler's decision, which the
runtime broadcasts to every rank. In a trial process each report also leaves one line in the
trial's ``log.txt`` (:func:`report_line`: step, metrics, decision), so the log says what the
trial reported without storage or MLflow. A trial's first report must carry its objective:
one that lacks it raises :class:`~hyperfleet.spec.steps.ObjectiveMissingError` (every rank
fails at that step, naming what it reported) rather than training to the end for a value it
never reports. The launch's number of ranks (``spec.world_size``) goes with each report: as
the ``world_size`` metric to MLflow, and to storage at the launch's first report
(``hf_trials.sizes``), so an elastic trial's size is known at every step. An elastic trial the
controller asked to resize (:mod:`hyperfleet.platform.elastic.requests`) is answered PAUSE at
its next report with a checkpoint, and relaunched at its new size. It is built from the
trial's spec alone, so it works
the same in a torchrun trial's rank 0, in an in-process trial, and in a simulated trial inside
the controller (it imports no torch; a simulated trial prints nothing).

Fencing: every write carries the launch's attempt (``spec.attempt``) and storage refuses it
once a newer attempt exists or the trial was requeued (:class:`~hyperfleet.errors.Superseded`),
before anything of the report reaches the scheduler or the MLflow sink: a superseded copy
leaves no trace after its last accepted report.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hyperfleet.errors import StorageError, Superseded
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.elastic import requests as resize_requests
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.schedulers.pbt.pinning import Pinned, PinsCheckpoints
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.retry import retrying
from hyperfleet.platform.tracking import MetricSink
from hyperfleet.spec.recorder import Recorder
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.steps import ObjectiveMissingError, missing_objective
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind, TrialSpec

logger = logging.getLogger("hyperfleet.trial")
HP_TAG_PREFIX = "hp."  # a PBT member's current hyperparameters: ``hp.lr`` tags of its run
WORLD_SIZE_METRIC = "world_size"  # the ranks each reported step ran at, in MLflow

_OPEN: dict[tuple[int, str, float], Storage] = {}


def process_storage(url: str, retry_s: float) -> Storage:
    """The storage of this process's trials: a warm rank or an in-process worker runs trial
    after trial, and each reuses one engine, its connections and its compiled statements
    (opening them again cost a PBT member ~20 ms a segment). Never closed by a trial; a
    forked child opens its own."""
    key = (os.getpid(), url, retry_s)
    if key not in _OPEN:
        _OPEN[key] = Storage(url, create=False, retry_s=retry_s)
    return _OPEN[key]


def report_line(step: int, metrics: Mapping[str, float], decision: Decision) -> str:
    """The line a report leaves in the trial's ``log.txt``: ``report step 8: loss=0.1234
    val_accuracy=0.91 -> continue`` (the scheduler's decision, with its reason if any)."""
    shown = " ".join(f"{k}={v:.6g}" for k, v in metrics.items())
    then = decision.kind.value + (f" ({decision.reason})" if decision.reason else "")
    return f"report step {step}: {shown} -> {then}"


class RankZeroRecorder(Recorder):
    """Records, logs and decides each report; skips steps reported before a resume."""

    def __init__(self, spec: TrialSpec, clock: Any = None) -> None:
        assert spec.storage is not None and spec.sweep_config is not None
        cfg = SweepConfig.model_validate(spec.sweep_config)
        self.sweep = spec.sweep
        self.number = spec.number
        self.attempt = spec.attempt  # None: an unfenced spec (written by an older controller)
        self.shared = clock is None  # a simulated trial's clock is its own
        self.storage = (
            process_storage(spec.storage, cfg.storage_retry)
            if self.shared
            else Storage(spec.storage, create=False, clock=clock, retry_s=cfg.storage_retry)
        )
        self.scheduler = build_scheduler(cfg, self.storage)
        self.sink: MetricSink | None = None
        if spec.run_id and spec.tracking_uri:
            spool = Path(spec.trial_dir) / "mlflow"
            self.sink = MetricSink(  # the controller ships it (SweepTracker.ship_running)
                spec.tracking_uri, spec.run_id, spool, ship_every_s=None, system_metrics=True
            )
        self.params: Mapping[str, Any] = spec.params
        self.objectives = [o.metric for o in cfg.all_objectives]
        self._searched = set(cfg.space)
        self._pinned: Pinned | None = None  # as the last decision saw them (PBT)
        # Each store skips the steps it already holds from before an interruption: storage
        # is written at once, MLflow in batches, so the two can differ by a few reports.
        # MLflow's record is monotonic: a step is logged only after the last one the trial's
        # spool ever took (known without MLflow, which may be down), so each step is there
        # once, even after a PBT member rewinds to a donor's earlier step.
        prior = spec.reported_through
        self.reported_through = -1 if prior is None else int(prior)
        self.logged_through = -1 if self.sink is None else self.sink.through
        self.closed = False  # set by finish: later reports change nothing
        self.world_size = _ranks(spec)  # this launch's ranks (None: an older controller's)
        self._size_recorded = False  # at this launch's first accepted report
        self.trial_dir = spec.trial_dir
        # may be asked to resize: a range, even one its launch is at the top of (its spec then
        # says devices == max_devices, and Resources.elastic is false)
        self.elastic = spec.trial.resources.max_devices is not None
        self.checkpoint_every = spec.trial.checkpoint.every
        self.last = spec.trial.steps  # a resize there would relaunch a trial that is done
        self._hp_tags()
        self._log_adopted(spec)

    def _hp_metrics(self) -> dict[str, float]:
        """Hyperparameters as step metrics, for schedulers that change them during a run."""
        if not self.scheduler.capabilities.time_sharing:
            return {}
        return {
            f"hp/{k}": float(v)
            for k, v in self.params.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }

    def _hp_tags(self) -> None:
        """A time-sharing member's current hyperparameters as ``hp.<name>`` tags of its run,
        set as it starts or resumes and at each exploit: columns of MLflow's runs table that
        follow the member (its params, which MLflow never changes, keep the initial values)."""
        if self.sink is None or not self.scheduler.capabilities.time_sharing:
            return
        hps = {k: v for k, v in self.params.items() if k in self._searched}
        self.sink.set_tags({f"{HP_TAG_PREFIX}{k}": str(v) for k, v in hps.items()})

    def _log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log ``metrics`` and the hyperparameters at ``step`` if MLflow has no such step."""
        if self.sink is not None and step > self.logged_through:
            self.logged_through = step
            self.sink.log_metrics(step, {**metrics, **self._hp_metrics(), **self._size()})

    def _size(self) -> dict[str, float]:
        """This launch's ranks as the ``world_size`` metric (an elastic trial's size by step)."""
        return {} if self.world_size is None else {WORLD_SIZE_METRIC: float(self.world_size)}

    def _record_size(self, step: int) -> None:
        """At the launch's first accepted report: its ranks from ``step`` on, in storage."""
        if self._size_recorded or self.world_size is None:
            return
        self.storage.trials.record_size(
            self.sweep, self.number, step, self.world_size, self.attempt
        )
        self._size_recorded = True

    def _log_adopted(self, spec: TrialSpec) -> None:
        """A member resumed on a donor's weights (an exploit before a pause) holds what the
        donor reported at that step (the controller copied it to its record): logged as the
        member's point there, so its last point, its ``final/`` values and its params agree
        even when no report follows."""
        point = spec.restore
        if point is None or point.trial == spec.number or point.step is None:
            return
        record = self.storage.trials.get(self.sweep, self.number)
        if record is not None and record.last_step == point.step:
            self.check()
            self._log(point.step, dict(record.metrics))

    def check(self) -> None:
        """Raise :class:`~hyperfleet.errors.Superseded` when a newer attempt of this trial
        exists (or it was requeued): the runtime asks before each checkpoint save."""
        if self.attempt is not None:
            try:
                self.storage.trials.check_attempt(self.sweep, self.number, self.attempt)
            except Superseded:
                self._keep_points()
                raise

    def _keep_points(self) -> None:
        """This copy is superseded and about to stop (its worker may kill it any moment): the
        points of the reports storage accepted, still in memory, go to the spool now."""
        if self.sink is not None:
            self.sink.close(ship=False)
            self.sink = None

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        if self.closed:  # a thread the workload left behind: the trial's record is final
            logger.warning(
                "trial %s: a report of step %s after it ended is refused", self.number, step
            )
            return CONTINUE
        self._pinned = None
        if step <= self.reported_through:  # already recorded before the interruption
            if self.sink is not None and step > self.logged_through:
                self.check()
                self._log(step, metrics)
            return CONTINUE
        if self.reported_through < 0:  # its first report: without the objective, it fails
            missing = missing_objective(self.objectives, list(metrics))
            if missing is not None:
                raise ObjectiveMissingError(missing)
        # fenced first: a superseded copy's report reaches neither MLflow nor the scheduler
        try:
            self.storage.trials.record_report(self.sweep, self.number, step, metrics, self.attempt)
        except Superseded:
            self._keep_points()
            raise
        self.reported_through = step
        try:
            self._record_size(step)
        except Superseded:
            self._keep_points()
            raise
        self._log(step, metrics)
        retry_s = self.storage.retry_s  # the trial waits out a storage outage, then goes on
        tries = 0

        def decide() -> tuple[Decision, Pinned | None]:
            nonlocal tries
            tries += 1
            if tries > 1:  # after an outage: still this trial's current attempt?
                self.check()
            first = tries == 1
            if isinstance(self.scheduler, PinsCheckpoints):  # what it pins, in the same read
                return self.scheduler.report_decide_and_pin(
                    self.number, step, metrics, first_try=first
                )
            return self.scheduler.report_and_decide(
                self.number, step, metrics, first_try=first
            ), None

        decision, self._pinned = retrying(decide, retry_s)
        decision = self._resize(step, decision)
        if self.shared:  # a trial process: its stdout is the trial's log.txt
            print(report_line(step, metrics, decision), flush=True)
        return decision

    def _resize(self, step: int, decision: Decision) -> Decision:
        """An elastic trial the controller asked to resize (:mod:`.elastic.requests`) ends at
        this report, as a paused trial does, when it would continue and its checkpoint is
        kept here: the controller relaunches it at its new size from that checkpoint."""
        if not self.elastic or decision.kind != DecisionKind.CONTINUE:
            return decision
        done = self.last is not None and step >= self.last
        if done or (self.checkpoint_every and step % self.checkpoint_every):
            return decision  # its last step, or no checkpoint at this one: a later report
        devices = resize_requests.pending(self.trial_dir, self.attempt)
        if devices is None:
            return decision
        resize_requests.take(self.trial_dir)
        return Decision(DecisionKind.PAUSE, reason=f"resize to {devices} devices")

    def pinned_steps(self) -> set[int] | None:
        """This trial's checkpoints another trial will still load: never pruned. None if the
        store cannot say (a transient database error): then the runtime prunes nothing. As
        the last report's decision saw them, if it did (the runtime prunes right after it:
        a checkpoint pinned since then can only be the newest, which is kept)."""
        pinned, self._pinned = self._pinned, None
        if not isinstance(self.scheduler, PinsCheckpoints):
            return set()  # its trials load no other trial's checkpoints
        if pinned is None:
            try:
                pinned = self.scheduler.pinned_checkpoints()
            except (SQLAlchemyError, StorageError) as exc:
                logger.warning("could not read pinned checkpoints (%s); pruning none", exc)
                return None
        return {s for t, s in pinned if t == self.number}

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        """After an exploit the trial continues from the donor's ``step`` with ``params``:
        its record takes the new params and, if the donor reported at that step, the
        donor's metrics there (what the adopted weights score). MLflow gets that state as
        the member's point at ``step`` when it has no such step yet (a donor ahead); for a
        donor behind, the steps up to the member's own last one are not logged again."""
        self.params = params
        self._hp_tags()
        self.reported_through = step
        fields: dict[str, Any] = {"params": dict(params), "last_step": step}
        theirs = self.storage.trials.get(self.sweep, donor)
        adopted: dict[str, float] = {}
        if theirs is not None and theirs.last_step == step:
            fields["metrics"] = adopted = dict(theirs.metrics)
        self.storage.trials.upsert(self.sweep, self.number, fence=self.attempt, **fields)
        self._log(step, adopted)

    def note(self, message: str, restart: bool = True) -> None:
        """Keep ``message`` in the trial's record (``sweep status`` shows it); ``restart``: the
        trial starts over, so its reports are recorded again from the first."""
        if restart:
            self.reported_through = -1
        self.storage.trials.upsert(self.sweep, self.number, fence=self.attempt, notes=message)

    def finish(self, outcome: str) -> None:
        """Record the outcome. ``superseded``: a newer attempt owns the trial; nothing is
        recorded (the points of the reports storage accepted go to the spool)."""
        self.closed = True
        if self.sink is not None:  # the controller ships the rest when it ends the run
            self.sink.close(ship=False)
        try:
            if outcome != Outcome.SUPERSEDED:
                self.storage.trials.upsert(
                    self.sweep, self.number, fence=self.attempt, outcome=outcome
                )
        finally:  # refused (Superseded: requeued meanwhile) or not, its connections go back
            if not self.shared:
                self.storage.close()


def _ranks(spec: TrialSpec) -> int | None:
    """The ranks of the process group this recorder's rank belongs to: torchrun's
    ``WORLD_SIZE`` where it runs in a rank that torchrun's agent started (a trial whose nodes
    are a range continues on fewer after one is lost: its agents restart its ranks at the
    smaller size, under the same spec), else the spec's (None: an older controller's). A
    ``WORLD_SIZE`` that the controller's own environment happens to hold (a job scheduler's)
    is not the trial's."""
    given = os.environ.get("WORLD_SIZE")
    in_a_rank = "TORCHELASTIC_RESTART_COUNT" in os.environ
    if in_a_rank and given is not None and given.isdigit() and spec.world_size is not None:
        return int(given)
    return spec.world_size
