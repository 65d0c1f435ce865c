"""The trial runtime: what every trial process runs, from its spec to its outcome.

It joins the process group, builds the :class:`~hyperfleet.trials.context.TrialContext` and
runs the workload function. Rank 0 is handed a *recorder*
(:class:`~hyperfleet.spec.recorder.Recorder`) by whoever started the process (the
platform's trial entry point records each report in storage and MLflow and asks the scheduler
for a decision; ``hyperfleet train`` prints it); the context broadcasts the decision so every
rank acts on the same step. The runtime knows nothing of how it was scheduled.

The workload function may run several times in the same processes: an EXPLOIT decision
(population-based training) copies the donor's checkpoint into this trial's directory and
calls the workload again with the explored params, which win over anything in the checkpoint;
no process is relaunched. A replayed schedule (``sweep replay``) runs it once per segment.
When the workload returns, rank 0's recorder is told the outcome (complete, pruned, paused or
fail); the controller turns it into the trial's final state. A workload that raises makes the
process exit non-zero, its traceback in the trial's log.

**Fencing.** A copy taken over by a newer attempt (its host paused past ``stale_after``) learns
it at its next report (:mod:`hyperfleet.trials.fencing`): every rank stops at that step with
nothing more recorded, logs ``superseded by attempt N; stopping`` and exits 0.

**Reuse.** A warm process group (:mod:`hyperfleet.platform.launcher.warm`) runs trial after
trial in the same processes, its process group kept (``keep_process_group``). Before each
trial :class:`Baseline` puts back what a fresh process would have had, so a trial's metrics do
not depend on the trials before it: the working directory and environment the group was started
with, torch's, Python's and NumPy's default generators seeded from fresh entropy (as a new
process seeds them: unseeded draws differ from run to run cold too), grad mode, default dtype,
thread count, deterministic-algorithm and TF32 flags, autocast's cache and the CUDA
allocator's cache, and the root logger's handlers. Workloads seed
themselves from their params as they do in a fresh process. What it cannot put back is a
workload module's own globals: ``trial.reuse: false`` gives such a workload fresh processes.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from hyperfleet.errors import Superseded, TrialPruned
from hyperfleet.spec.recorder import Recorder, RecorderFactory
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.trial import replica_join
from hyperfleet.spec.wire import CONTINUE, Decision, TrialSpec, trial_dir
from hyperfleet.spec.workloads import load_workload, merged_params
from hyperfleet.trials import distributed
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import Exploit, Pause, TrialContext
from hyperfleet.trials.distributed import DistEnv
from hyperfleet.trials.fencing import FencedCheckpoints

logger = logging.getLogger("hyperfleet.trial")

#: seconds an exploiting member waits for its donor's checkpoint to reach an object store
#: replica (uploaded in the background on the donor's host) before it takes the latest one
DONOR_WAIT_S = 60.0


class PrintRecorder(Recorder):
    """``hyperfleet train`` and ``sweep replay``: no storage, no scheduler; reports printed."""

    def __init__(self, spec: TrialSpec | None = None) -> None:
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

    def pinned_steps(self) -> set[int] | None:
        return set()

    def note(self, message: str, restart: bool = True) -> None:
        print(f"note: {message}", flush=True)

    def check(self) -> None:
        pass  # no storage: no newer attempt can take the trial over


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [rank {rank}] %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )


class Stopped(SystemExit):
    """SIGTERM: the launcher stops the trial (never mistaken for the workload's own exit)."""


class WorkloadExitError(RuntimeError):
    """The workload called ``sys.exit()``: the trial fails (a workload returns instead)."""


def _exited(exc: SystemExit, step: int | None) -> WorkloadExitError:
    arg = "" if exc.code is None else repr(exc.code)
    where = "before its first report" if step is None else f"at step {step}"
    return WorkloadExitError(
        f"the workload called sys.exit({arg}) (SystemExit) {where}; a workload returns instead"
    )


def exit_on_sigterm() -> None:
    """SIGTERM (the launcher stopping the trial) unwinds the stack, so buffered metrics are
    flushed and the process group is torn down instead of dying mid-write."""

    def handler(signum: int, _frame: Any) -> None:
        raise Stopped(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def checkpoints_of(
    spec: TrialSpec,
    number: int,
    protect: Callable[[], set[int] | None] | None = None,
    fence: Callable[[], None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> CheckpointManager:
    """The checkpoints of trial ``number`` of this sweep: in its trial directory and, with
    ``checkpoint.replica``, in its folder under the sweep's replica folder. A run without
    stores (``hyperfleet train``, ``sweep replay``) writes no replica. ``fence``: asked
    before each save (:mod:`~hyperfleet.trials.fencing`); ``notify``: told what the trial's
    record should say of an object store's outage."""
    own = spec.number == number
    directory = Path(spec.trial_dir) if own else trial_dir(spec.workdir, spec.sweep, number)
    replica = None if spec.replica is None else replica_join(spec.replica, directory.name)
    cfg = spec.trial.checkpoint
    timeouts = (cfg.connect_timeout, cfg.read_timeout)
    if fence is not None:
        return FencedCheckpoints(
            directory / "checkpoints", keep=cfg.keep, replica=replica, protect=protect,
            fence=fence, timeouts=timeouts, notify=notify,
        )  # fmt: skip
    return CheckpointManager(
        directory / "checkpoints", keep=cfg.keep, replica=replica, protect=protect,
        cache=not own, timeouts=timeouts, notify=notify,
    )  # fmt: skip


def _adopt_donor(
    own: CheckpointManager, donor: CheckpointManager, donor_step: int | None, env: DistEnv
) -> int:
    """Rank 0 copies the donor's checkpoint into this trial's directory; returns its step.

    The trial's own checkpoints after that step are dropped: they belong to the weights it
    just gave up, and must never be resumed from.
    """
    step = -1
    if env.is_main:
        found = donor.load_at(donor_step, wait=DONOR_WAIT_S)
        if found is None:
            raise RuntimeError(f"exploit: the donor has no checkpoint in {donor.directory}")
        step, state = found
        own.discard_after(step)
        own.save(step, state)
    return int(distributed.broadcast_object(step, env))


def _segments(spec: TrialSpec) -> list[tuple[int, dict[str, Any]]]:
    """``(max_steps, params)`` per run of the workload: one, or a replayed schedule's."""
    trial = spec.trial
    if not spec.schedule:
        return [(trial.length, dict(spec.params))]
    ends = [int(start) for start, _ in spec.schedule[1:]] + [trial.length]
    return [
        (end, merged_params(trial.workload, trial.params, params, searched=spec.searched))
        for end, (_, params) in zip(ends, spec.schedule, strict=True)
    ]


class _Run:
    """One trial process's run of the workload (see the module docstring)."""

    def __init__(self, spec: TrialSpec, env: DistEnv, recorder: Recorder | None) -> None:
        self.spec = spec
        self.env = env
        self.recorder = recorder
        if recorder is None:
            self.own = checkpoints_of(spec, spec.number)
        else:
            notify = partial(recorder.note, restart=False)
            self.own = checkpoints_of(
                spec, spec.number, recorder.pinned_steps, recorder.check, notify
            )
        # The step of this trial's checkpoints every rank continues from (None: step 0). Rank 0
        # names it, so that a rank that starts later never finds a checkpoint that this
        # attempt's own ranks have written meanwhile.
        self.restore: int | None = None

    def adopt(self, donor: int, step: int | None, params: Mapping[str, Any]) -> int:
        """Continue from ``donor``'s checkpoint at ``step``; rank 0's record follows."""
        got = _adopt_donor(self.own, checkpoints_of(self.spec, donor), step, self.env)
        if self.recorder is not None and got != step:
            logger.warning("the donor's checkpoint of step %s is gone; using step %d", step, got)
        self.restore = got
        return got

    def agree_latest(self) -> int | None:
        """Rank 0's newest intact checkpoint of this trial, the same on every rank."""
        step = self.own.latest_step() if self.env.is_main else None
        self.restore = distributed.broadcast_object(step, self.env)
        return self.restore

    def start(self) -> None:
        point = self.spec.restore
        if point is None:
            self._check_resumable(self.agree_latest())
        elif point.trial != self.spec.number:
            # Resuming from a donor's weights (a PBT member after an exploit): copy them in
            # first, so that this trial's own latest checkpoint is what it trains from.
            got = self.adopt(point.trial, point.step, self.spec.params)
            if self.recorder is not None and got != point.step:
                self.recorder.rewind(got, self.spec.params, point.trial)
        elif point.step is None:
            self.agree_latest()
        else:
            self.restore = point.step

    def _check_resumable(self, latest: int | None) -> None:
        """A trial that reported before (it is resumed, maybe on another host) but has no
        checkpoint readable here restarts from step 0, and its record says why."""
        if not self.spec.reported_through or latest is not None:
            return
        message = (
            f"resumed on {socket.gethostname()} without a readable checkpoint (it had reported "
            f"step {self.spec.reported_through}); restarted from step 0 — give "
            f"trial.checkpoint.replica a folder every host can read"
        )
        logger.warning(message)
        if self.recorder is not None:
            self.recorder.note(message)

    def context(self, max_steps: int, params: Mapping[str, Any]) -> TrialContext:
        trial = self.spec.trial
        return TrialContext(
            params=params,
            env=self.env,
            max_steps=max_steps,
            eval_every=trial.eval_every,
            trial_number=self.spec.number,
            sweep=self.spec.sweep,
            config=trial,
            workdir=self.own.directory.parent,
            checkpoints=self.own,
            checkpoint_every=trial.checkpoint.every,
            reporter=self.recorder,
            restore_step=self.restore,
            fresh=self.restore is None,
        )

    def segment(self, fn: Callable[[TrialContext], Any], max_steps: int, params: Any) -> None:
        """Run the workload to ``max_steps``, restarting it in place after each exploit.

        Defaults a custom workload declares (``main.hyperfleet_params``) fill in the params
        the spec doesn't give. A ``SystemExit`` the workload raises (``sys.exit(0)`` too)
        fails the trial with ``WorkloadExitError`` naming it; the context is closed when the
        workload ends, so a report from a thread it left behind is refused."""
        trial = self.spec.trial
        params = merged_params(trial.workload, {}, params, fn, self.spec.searched)
        while True:
            ctx = self.context(max_steps, params)
            try:
                fn(ctx)
                return
            except Stopped:
                raise
            except SystemExit as exc:  # sys.exit() in the workload: a failure, never success
                raise _exited(exc, ctx.last_step) from None
            except Exploit as change:
                d = change.decision
                assert d.donor is not None and d.params is not None
                params = merged_params(
                    trial.workload, trial.params, d.params, fn, self.spec.searched
                )
                step = self.adopt(d.donor, d.donor_step, params)
                if self.recorder is not None:
                    self.recorder.rewind(step, params, d.donor)
                logger.info("exploit: continues from trial %s at step %d", d.donor, step)
            finally:
                ctx.close()  # a report after the workload returned changes nothing


def run_trial(
    spec: TrialSpec,
    recorder_factory: RecorderFactory | None = None,
    install_signals: bool = False,
    keep_process_group: bool = False,
) -> str:
    """Run one trial described by ``spec``; returns its outcome (rank 0's recorder is built by
    ``recorder_factory``, default :class:`PrintRecorder`). ``keep_process_group``: a warm
    group's next trial uses it again (see the module docstring)."""
    if install_signals:
        exit_on_sigterm()
    env = distributed.init()
    distributed.cap_memory(env, spec.trial.resources.per_device)
    _setup_logging(env.rank)
    recorder = (recorder_factory or PrintRecorder)(spec) if env.is_main else None
    run = _Run(spec, env, recorder)
    outcome = Outcome.FAIL
    try:
        run.start()
        fn = load_workload(spec.trial.entry, spec.trial.code)
        for max_steps, params in _segments(spec):
            run.segment(fn, max_steps, params)
            run.agree_latest()  # a replay's next segment continues from where this one ended
        outcome = Outcome.COMPLETE
    except TrialPruned as exc:
        logger.info("trial %s pruned: %s", spec.number, exc)
        outcome = Outcome.PRUNED
    except Pause:
        logger.info("trial %s paused; it resumes from its checkpoint", spec.number)
        outcome = Outcome.PAUSED
    except Superseded as exc:  # a newer attempt runs the trial: record nothing, leave quietly
        logger.warning("trial %s %s; stopping", spec.number, exc)
        outcome = Outcome.SUPERSEDED
    finally:
        _close_checkpoints(run.own)  # the trial ends once its checkpoints are replicated
        if not keep_process_group:
            distributed.teardown()
        if recorder is not None:
            _finish(recorder, spec, outcome)  # a failed trial keeps the metrics it reported
    return outcome


def _close_checkpoints(own: CheckpointManager) -> None:
    """Wait for the checkpoints' uploads to an object store replica (see
    :mod:`hyperfleet.trials.replica`); a failure is logged, the outcome still recorded."""
    try:
        own.close()
    except (Exception, Stopped):  # the local copies are intact; the outcome must still be told
        logger.exception("trial's checkpoint uploads did not finish")


def _finish(recorder: Recorder, spec: TrialSpec, outcome: str) -> None:
    """Tell rank 0's recorder the outcome; refused when the trial was taken over meanwhile
    (then this copy has nothing to say)."""
    try:
        recorder.finish(outcome)
    except Superseded as exc:
        logger.warning("trial %s %s; stopping", spec.number, exc)
