"""Entry point of every trial process: ``torchrun ... -m hyperfleet.platform.trial_main SPEC``.

It joins the process group, builds the :class:`~hyperfleet.trials.context.TrialContext` and
runs the workload. Rank 0 also rebuilds the sweep's scheduler from storage and opens the
trial's MLflow run, so that each ``ctx.report`` is recorded (storage), logged (MLflow, batched)
and decided (scheduler) before the decision is broadcast to every rank.

The workload function may run several times in the same processes: an EXPLOIT decision
(population-based training) copies the donor's checkpoint into this trial's directory and
calls the workload again with the explored params, which win over anything in the checkpoint;
no process is relaunched. A replayed schedule (``sweep replay``) runs it once per segment.
When the workload returns, rank 0 records the outcome (complete, pruned, paused or fail); the
controller turns it into the trial's final state. A workload that raises makes the process exit
non-zero, its traceback in the trial's log.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hyperfleet.errors import StorageError, TrialPruned
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.paths import trial_dir
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import MetricSink
from hyperfleet.spec.wire import Decision
from hyperfleet.trials import distributed
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import CONTINUE, Exploit, Pause, TrialContext
from hyperfleet.trials.distributed import DistEnv
from hyperfleet.trials.workloads.registry import load_workload, merged_params

logger = logging.getLogger("hyperfleet.trial")


class PrintReporter:
    """``hyperfleet train`` and ``sweep replay``: no storage, no scheduler; reports printed."""

    def __init__(self) -> None:
        self.last: tuple[int, dict[str, float]] | None = None

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        shown = "  ".join(f"{k}={v:.6g}" for k, v in metrics.items())
        print(f"step {step}: {shown}", flush=True)
        self.last = (step, dict(metrics))
        return CONTINUE

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        pass

    def finish(self, outcome: str) -> None:
        if self.last is None:
            print(f"run {outcome}", flush=True)
        else:  # the last report in full precision, so a replay can be compared exactly
            print(f"run {outcome} at step {self.last[0]}: {json.dumps(self.last[1])}", flush=True)


class RankZeroReporter:
    """Records, logs and decides each report; skips steps reported before a resume."""

    def __init__(self, spec: Mapping[str, Any], cfg: SweepConfig) -> None:
        self.sweep = spec["sweep"]
        self.number = int(spec["number"])
        self.storage = Storage(spec["storage"], create=False)
        self.scheduler = build_scheduler(cfg, self.storage)
        self.sink = MetricSink(spec["tracking_uri"], spec["run_id"]) if spec["run_id"] else None
        self.params: Mapping[str, Any] = spec["params"]
        # Each store skips the steps it already holds from before an interruption: storage
        # is written at once, MLflow in batches, so the two can differ by a few reports.
        prior = spec.get("reported_through")
        self.reported_through = -1 if prior is None else int(prior)
        self.logged_through = -1
        if self.sink is not None and prior is not None:
            self.logged_through = self.sink.logged_through(cfg.all_objectives[0].metric)

    def _hp_metrics(self) -> dict[str, float]:
        """Hyperparameters as step metrics, for schedulers that change them during a run."""
        if not self.scheduler.time_sharing:
            return {}
        return {
            f"hp/{k}": float(v)
            for k, v in self.params.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        if self.sink is not None and step > self.logged_through:
            self.logged_through = step
            self.sink.log_metrics(step, {**metrics, **self._hp_metrics()})
        if step <= self.reported_through:
            return CONTINUE  # already recorded before the interruption
        self.reported_through = step
        self.storage.record_report(self.sweep, self.number, step, metrics)
        self.scheduler.report(self.number, step, metrics)
        return self.scheduler.decide(self.number, step)

    def pinned_steps(self) -> set[int] | None:
        """This trial's checkpoints another trial will still load: never pruned. None if the
        store cannot say (a transient database error): then the runtime prunes nothing."""
        try:
            pinned = self.scheduler.pinned_checkpoints()
        except (SQLAlchemyError, StorageError) as exc:
            logger.warning("could not read pinned checkpoints (%s); pruning none", exc)
            return None
        return {s for t, s in pinned if t == self.number}

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        """After an exploit the trial continues from the donor's ``step`` with ``params``:
        its record takes the new params and, if the donor reported at that step, the
        donor's metrics there (what the adopted weights score)."""
        self.params = params
        self.reported_through = self.logged_through = step
        fields: dict[str, Any] = {"params": dict(params), "last_step": step}
        theirs = self.storage.get_trial(self.sweep, donor)
        if theirs is not None and theirs.last_step == step:
            fields["metrics"] = dict(theirs.metrics)
        self.storage.upsert_trial(self.sweep, self.number, **fields)

    def finish(self, outcome: str) -> None:
        if self.sink is not None:
            self.sink.close()
        self.storage.upsert_trial(self.sweep, self.number, outcome=outcome)
        self.storage.close()


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [rank {rank}] %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )


def _exit_on_sigterm() -> None:
    """SIGTERM (the launcher stopping the trial) unwinds the stack, so buffered metrics are
    flushed and the process group is torn down instead of dying mid-write."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _checkpoints(
    cfg: SweepConfig, spec: Mapping[str, Any], number: int, **kw: Any
) -> CheckpointManager:
    """The checkpoints of trial ``number`` of this sweep: in its trial directory and, with
    ``checkpoint.replica``, in its folder under the sweep's replica folder. A run without
    stores (``hyperfleet train``, ``sweep replay``) writes no replica."""
    own = int(spec["number"]) == number
    directory = Path(spec["trial_dir"]) if own else trial_dir(cfg.workdir, cfg.name, number)
    folder = spec.get("replica")
    replica = None if folder is None else Path(folder) / directory.name
    return CheckpointManager(
        directory / "checkpoints", keep=cfg.trial.checkpoint.keep, replica=replica, **kw
    )


def _adopt_donor(
    own: CheckpointManager, donor: CheckpointManager, donor_step: int | None, env: DistEnv
) -> int:
    """Rank 0 copies the donor's checkpoint into this trial's directory; returns its step.

    The trial's own checkpoints after that step are dropped: they belong to the weights it
    just gave up, and must never be resumed from.
    """
    step = -1
    if env.is_main:
        found = donor.load_at(donor_step)
        if found is None:
            raise RuntimeError(f"exploit: the donor has no checkpoint in {donor.directory}")
        step, state = found
        own.discard_after(step)
        own.save(step, state)
    return int(distributed.broadcast_object(step, env))


def _segments(spec: Mapping[str, Any], cfg: SweepConfig) -> list[tuple[int, dict[str, Any]]]:
    """``(max_steps, params)`` per run of the workload: one, or a replayed schedule's."""
    schedule = spec.get("schedule")
    if not schedule:
        return [(cfg.trial.steps, dict(spec["params"]))]
    ends = [int(start) for start, _ in schedule[1:]] + [cfg.trial.steps]
    return [
        (end, merged_params(cfg.trial.workload, cfg.trial.params, params))
        for end, (_, params) in zip(ends, schedule, strict=True)
    ]


def run_trial(spec_path: Path, install_signals: bool = False) -> str:
    """Run one trial described by the spec file; returns its outcome."""
    if install_signals:
        _exit_on_sigterm()
    spec = json.loads(Path(spec_path).read_text())
    cfg = SweepConfig.model_validate(spec["config"])
    env = distributed.init()
    _setup_logging(env.rank)
    reporter: RankZeroReporter | PrintReporter | None = None
    if env.is_main:
        reporter = RankZeroReporter(spec, cfg) if spec["storage"] else PrintReporter()
    number = int(spec["number"])
    protect = reporter.pinned_steps if isinstance(reporter, RankZeroReporter) else None
    own = _checkpoints(cfg, spec, number, protect=protect)
    restore: int | None = None  # a step of this trial's checkpoints (None: the latest)
    if spec.get("restore"):
        point = spec["restore"]
        restore = point["step"]
        if int(point["trial"]) != number:
            # Resuming from a donor's weights (a PBT member after an exploit): copy them in
            # first, so that this trial's own latest checkpoint is what it trains from.
            donor = int(point["trial"])
            step = _adopt_donor(own, _checkpoints(cfg, spec, donor), point["step"], env)
            restore = step
            if reporter is not None and step != point["step"]:
                logger.warning("the donor's checkpoint of step %s is gone; using step %d",
                               point["step"], step)  # fmt: skip
                reporter.rewind(step, spec["params"], donor)
    fn = load_workload(cfg.trial.workload)
    outcome = "fail"
    try:
        for max_steps, params in _segments(spec, cfg):
            while True:
                ctx = TrialContext(
                    params=params,
                    env=env,
                    max_steps=max_steps,
                    eval_every=cfg.trial.eval_every,
                    trial_number=number,
                    sweep=spec["sweep"],
                    config=cfg.trial,
                    workdir=own.directory.parent,
                    checkpoints=own,
                    checkpoint_every=cfg.trial.checkpoint.every,
                    reporter=reporter,
                    restore_step=restore,
                )
                try:
                    fn(ctx)
                    outcome = "complete"
                    break
                except Exploit as change:
                    d = change.decision
                    assert d.donor is not None, "an exploit names its donor"
                    donor_ckpts = _checkpoints(cfg, spec, d.donor)
                    step = _adopt_donor(own, donor_ckpts, d.donor_step, env)
                    params = merged_params(cfg.trial.workload, cfg.trial.params, d.params or {})
                    restore = step
                    if reporter is not None:
                        reporter.rewind(step, params, d.donor)
                    logger.info("exploit: continues from trial %s at step %d", d.donor, step)
            restore = None  # a replay's next segment continues from this trial's latest
    except TrialPruned as exc:
        logger.info("trial %s pruned: %s", spec["number"], exc)
        outcome = "pruned"
    except Pause:
        logger.info("trial %s paused; it resumes from its checkpoint", spec["number"])
        outcome = "paused"
    finally:
        distributed.teardown()
        if reporter is not None:
            reporter.finish(outcome)  # a failed trial keeps the metrics it reported
    return outcome


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    args = sys.argv[1:] if argv is None else argv
    record(run_trial)(Path(args[0]), install_signals=True)
    return 0


def _exit_now(code: int) -> None:
    """End a trial process whose work is recorded without the interpreter's teardown: torch's
    RPC (TensorPipe) threads can abort the process while native objects are destroyed at exit
    ("terminate called without an active exception"), turning a finished trial into a failed
    one. Everything the trial owns (stores, MLflow, process groups) is closed by now."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
