"""Entry point of every trial process: ``torchrun ... -m hyperfleet.platform.trial_main SPEC``.

It joins the process group, builds the :class:`~hyperfleet.trials.context.TrialContext`, and
runs the workload. Rank 0 also rebuilds the sweep's scheduler from storage and opens the
trial's MLflow run, so that each ``ctx.report`` is recorded (storage), logged (MLflow, batched)
and decided (scheduler) before the decision is broadcast. When the workload returns, rank 0
records the outcome; the controller turns it into the trial's final state. A workload that
raises makes the process exit non-zero, its traceback in the trial's log.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from hyperfleet.errors import TrialPruned
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import MetricSink
from hyperfleet.trials import distributed
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.workloads.registry import load_workload

logger = logging.getLogger("hyperfleet.trial")


class PrintReporter:
    """``hyperfleet train``: no storage, no scheduler; each report is printed."""

    def __call__(self, step: int, metrics: Mapping[str, float]) -> tuple[str, str]:
        shown = "  ".join(f"{k}={v:.5g}" for k, v in metrics.items())
        print(f"step {step}: {shown}", flush=True)
        return ("continue", "")

    def finish(self, outcome: str) -> None:
        print(f"run {outcome}", flush=True)


class RankZeroReporter:
    """Records, logs and decides each report; skips steps reported before a resume."""

    def __init__(self, spec: Mapping[str, Any], cfg: SweepConfig) -> None:
        self.sweep = spec["sweep"]
        self.number = int(spec["number"])
        self.storage = Storage(spec["storage"])
        self.scheduler = build_scheduler(cfg, self.storage)
        self.sink = MetricSink(spec["tracking_uri"], spec["run_id"]) if spec["run_id"] else None
        # Each store skips the steps it already holds from before an interruption: storage
        # is written at once, MLflow in batches, so the two can differ by a few reports.
        prior = spec.get("reported_through")
        self.reported_through = -1 if prior is None else int(prior)
        self.logged_through = -1
        if self.sink is not None and prior is not None:
            self.logged_through = self.sink.logged_through(cfg.objectives[0].metric)

    def __call__(self, step: int, metrics: Mapping[str, float]) -> tuple[str, str]:
        if self.sink is not None and step > self.logged_through:
            self.logged_through = step
            self.sink.log_metrics(step, metrics)
        if step <= self.reported_through:
            return ("continue", "")  # already recorded before the interruption
        self.reported_through = step
        self.storage.record_report(self.sweep, self.number, step, metrics)
        self.scheduler.report(self.number, step, metrics)
        decision = self.scheduler.decide(self.number, step)
        return (decision.kind.value, decision.reason)

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


@record
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    _exit_on_sigterm()
    spec = json.loads(Path(args[0]).read_text())
    cfg = SweepConfig.model_validate(spec["config"])
    env = distributed.init()
    _setup_logging(env.rank)
    reporter: RankZeroReporter | PrintReporter | None = None
    if env.is_main:
        reporter = RankZeroReporter(spec, cfg) if spec["storage"] else PrintReporter()
    trial_dir = Path(spec["trial_dir"])
    ctx = TrialContext(
        params=spec["params"],
        env=env,
        max_steps=cfg.trial.steps,
        eval_every=cfg.trial.eval_every,
        trial_number=int(spec["number"]),
        sweep=spec["sweep"],
        config=cfg.trial,
        workdir=trial_dir,
        checkpoints=CheckpointManager(trial_dir / "checkpoints"),
        checkpoint_every=cfg.trial.checkpoint_every,
        reporter=reporter,
    )
    fn = load_workload(cfg.trial.workload)
    outcome = "fail"
    try:
        fn(ctx)
        outcome = "complete"
    except TrialPruned as exc:
        logger.info("trial %s pruned: %s", ctx.trial_number, exc)
        outcome = "pruned"
    finally:
        distributed.teardown()
        if reporter is not None:
            reporter.finish(outcome)  # a failed trial keeps the metrics it reported
    return 0


if __name__ == "__main__":
    sys.exit(main())
